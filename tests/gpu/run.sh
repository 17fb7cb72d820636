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

# 2. libslice on the real driver: the CUDA runtime and (where installed) PyTorch see the cap and are
#    refused at it; the trace log records which launch entry points the runtime fetched.
slice=build/lib/libslice.so
# Carried from a build machine as build/gpu-carry (tests/gpu/prepare_carry.sh) where build/ is not here.
[ -f "$slice" ] || [ ! -f build/gpu-carry/lib/libslice.so ] || slice=build/gpu-carry/lib/libslice.so
cap=$((2 * 1024 * 1024 * 1024))
if [ -f "$slice" ]; then
  coordinator=$out/coordinator
  check build-driver-cap g++ -std=c++17 -O2 -I"$cuda_home/include" tests/gpu/driver_cap.cpp -o "$out/driver_cap" \
    -L"$cuda_home/lib64/stubs" -lcuda
  check driver-cap env LD_PRELOAD="$PWD/$slice" SLICE_MEMORY_LIMIT=$cap SLICE_COORDINATOR_DIR="$coordinator" \
    "$out/driver_cap" $cap
  check build-runtime-cap "$cuda_home/bin/nvcc" -O2 tests/gpu/runtime_cap.cu -o "$out/runtime_cap"
  check runtime-cap env LD_PRELOAD="$PWD/$slice" SLICE_MEMORY_LIMIT=$cap SLICE_COORDINATOR_DIR="$coordinator" \
    SLICE_LOG_LEVEL=trace SLICE_LOG_FILE="$out/runtime-trace.log" "$out/runtime_cap" $cap
  echo "launch entry points the runtime fetched through cuGetProcAddress:"
  grep -o 'cuGetProcAddress: cu[A-Za-z]*Launch[A-Za-z_]*[^;]*' "$out/runtime-trace.log" | sort -u | head -20
  if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    check torch-cap env LD_PRELOAD="$PWD/$slice" SLICE_MEMORY_LIMIT=$cap SLICE_COORDINATOR_DIR="$coordinator" \
      python3 tests/gpu/torch_cap.py $cap
  else
    summary+=("SKIP  torch-cap (no PyTorch with CUDA here)")
  fi
  # Compute shares on the real device: two busy processes with 30/70 shares split it in the ratio
  # of the kernels each completed (same kernel length), plainly and as CUDA graphs.
  check build-compute-share "$cuda_home/bin/nvcc" -O2 tests/gpu/compute_share.cu -o "$out/compute_share"
  for mode in kernels graph; do
    share_check() {
      env LD_PRELOAD="$PWD/$slice" SLICE_COORDINATOR_DIR="$coordinator" SLICE_TENANT=gpu-a-$mode \
        SLICE_COMPUTE_SHARE=30 "$out/compute_share" 8 1000 $mode > "$out/a-$mode.out" &
      local a=$!
      env LD_PRELOAD="$PWD/$slice" SLICE_COORDINATOR_DIR="$coordinator" SLICE_TENANT=gpu-b-$mode \
        SLICE_COMPUTE_SHARE=70 "$out/compute_share" 8 1000 $mode > "$out/b-$mode.out"
      wait $a
      python3 - "$out/a-$mode.out" "$out/b-$mode.out" <<'PY'
import sys
a, b = (int(open(p).read().split()[1]) for p in sys.argv[1:3])
share = a / (a + b)
print(f"30/70 shares: kernels {a} / {b}, the 30% tenant received {share:.3f}")
sys.exit(0 if abs(share - 0.30) <= 0.05 else 1)
PY
    }
    check "compute-share-$mode" share_check
  done
else
  summary+=("FAIL  libslice (build/lib/libslice.so not carried here)"); failures=$((failures + 1))
fi

# 3. The Kubernetes device plugin against the real NVML: `--list` advertises 4 slices per GPU, with
#    the UUIDs nvidia-smi reports and a quarter of each GPU's memory (whole MiB).
plugin=build/bin/slice-device-plugin
if [ ! -x "$plugin" ] && [ -x build/gpu-carry/bin/slice-device-plugin ]; then
  plugin=build/gpu-carry/bin/slice-device-plugin
  export LD_LIBRARY_PATH="$PWD/build/gpu-carry/runtime-libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
if [ -x "$plugin" ] && ldd "$plugin" | grep -q "not found"; then
  summary+=("SKIP  device-plugin-list (gRPC libraries not here: scripts/setup.sh, or carry build/gpu-carry from tests/gpu/prepare_carry.sh)")
elif [ -x "$plugin" ]; then
  plugin_list() {
    "$plugin" --list --slices 4 > "$out/plugin-list.txt" || return 1
    nvidia-smi --query-gpu=uuid,memory.total --format=csv,noheader,nounits > "$out/smi.csv" || return 1
    python3 - "$out/plugin-list.txt" "$out/smi.csv" <<'PY'
import re, sys
listing = open(sys.argv[1]).read()
print(listing)
gpus = [l.split(", ") for l in open(sys.argv[2]).read().splitlines() if l.strip()]
ids = re.findall(r"^  (\S+)$", listing, re.M)
assert len(ids) == 4 * len(gpus), f"{len(ids)} slices for {len(gpus)} GPUs"
for uuid, mib in gpus:
    assert [f"{uuid}::{k}" for k in range(4)] == [i for i in ids if i.startswith(uuid)], uuid
    m = re.search(re.escape(uuid) + r" .*?: (\d+) bytes, 4 slices of (\d+) bytes", listing)
    total, per_slice = int(m.group(1)), int(m.group(2))
    assert abs(total // 2**20 - int(mib)) <= 1, (total, mib)  # nvidia-smi rounds to MiB
    assert per_slice == total // 4 // 2**20 * 2**20, per_slice
    assert all(len(i) <= 63 for i in ids)
print(f"{len(ids)} slices on {len(gpus)} GPUs: IDs, UUIDs and memory per slice match")
PY
  }
  check device-plugin-list plugin_list
else
  summary+=("SKIP  device-plugin-list (build/bin/slice-device-plugin not built here)")
fi

echo
echo "== tests/gpu summary =="
printf '%s\n' "${summary[@]}"
exit $((failures > 0))
