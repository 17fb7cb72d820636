#!/usr/bin/env bash
# Builds and runs the benchmarks; prints their figures (the README quotes them).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
work=$(mktemp -d "${TMPDIR:-/tmp}/slice-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
export SIMGPU_STATE="$work/simgpu-state" SLICE_COORDINATOR_DIR="$work/coordinator"
build/bin/simgpu_bench
echo
build/bin/coordinator_bench
