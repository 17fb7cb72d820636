#!/usr/bin/env bash
# Checks that need a real NVIDIA GPU. Prints a summary and exits non-zero on any failure; where no GPU
# is present it says so and exits 0. It compiles only its own small programs (nvcc / g++ on the GPU
# machine); libslice itself is built elsewhere and carried in build/.
set -uo pipefail
cd "$(dirname "$0")/../.."
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "tests/gpu: no NVIDIA GPU here; nothing to check."
  exit 0
fi
nvidia-smi -L
out=$(mktemp -d "${TMPDIR:-/tmp}/slice-gpu.XXXXXX")
trap 'rm -rf "$out"' EXIT
cuda_home=${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")}
failures=0
summary=()
check() {  # check NAME COMMAND...
  local name=$1; shift
  if "$@" > "$out/$name.log" 2>&1; then summary+=("PASS  $name"); else summary+=("FAIL  $name"); failures=$((failures + 1)); fi
  tail -n 20 "$out/$name.log"
}

# 1. The real driver's cuGetProcAddress against the recorded look-ups of the CUDA 13 runtime.
check build-procaddr g++ -std=c++17 -O2 -I"$cuda_home/include" tests/gpu/procaddr_real.cpp -o "$out/procaddr_real" -ldl
check procaddr-real "$out/procaddr_real" tests/data/cudart13-procaddr-lookups.tsv

echo
echo "== tests/gpu summary =="
printf '%s\n' "${summary[@]}"
exit $((failures > 0))
