#!/usr/bin/env bash
# The demo: installs what is missing, builds, then runs two CUDA programs side by side on one GPU
# (the simulated one when no NVIDIA driver is present) and shows what the device really did.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
root=$PWD

if [ -e /dev/nvidiactl ] && command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  echo "An NVIDIA driver is present; this demo still runs on the simulated GPU, whose spin kernels"
  echo "take a chosen time, so that its figures mean the same everywhere."
else
  echo "No NVIDIA driver here: running on the simulated GPU (build/simgpu)."
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/slice-demo.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
export SIMGPU_STATE="$work/simgpu-state" SIMGPU_MEMORY=24Gi LD_LIBRARY_PATH="$root/build/simgpu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
stat="$root/build/bin/simgpu-stat"
load="$root/build/bin/simgpu-load"

echo
echo "== Two programs share one 24 GiB GPU with nothing to slice it (no libslice yet) =="
echo "   inference server: 6 GiB, 1 ms kernels;  batch job: 12 GiB, 10 ms kernels"
"$load" --seconds 6 --alloc-mib 6144 --kernel-us 1000 > "$work/inference.out" & pids+=($!)
"$load" --seconds 6 --alloc-mib 12288 --kernel-us 10000 > "$work/batch.out" & pids+=($!)
for f in inference batch; do
  for _ in $(seq 100); do grep -q ready "$work/$f.out" 2>/dev/null && break; sleep 0.05; done
done
measure() {  # measure SECONDS NAME1 PID1 NAME2 PID2: each program's share of device time
  local t0 t1
  t0=$(date +%s.%N); "$stat" --json > "$work/before.json"
  sleep "$1"
  t1=$(date +%s.%N); "$stat" --json > "$work/after.json"
  python3 - "$work/before.json" "$work/after.json" "$t0" "$t1" "$2" "$3" "$4" "$5" <<'PY'
import json, sys
before, after = (json.load(open(p))["devices"][0] for p in sys.argv[1:3])
window = float(sys.argv[4]) - float(sys.argv[3])
names = {int(sys.argv[6]): sys.argv[5], int(sys.argv[8]): sys.argv[7]}
busy0 = {p["pid"]: p["busy_ns"] for p in before["processes"]}
print(f"Device time over {window:.1f} s, as the simulated GPU measured it:")
total = 0
for p in after["processes"]:
    share = (p["busy_ns"] - busy0.get(p["pid"], 0)) / (window * 1e9)
    total += share
    print(f"  {names.get(p['pid'], p['pid']):<18} {share:6.1%}  memory {p['memory_bytes'] / 2**30:5.1f} GiB")
print(f"  {'device busy':<18} {total:6.1%}")
PY
}
sleep 1
measure 3 "inference server" "${pids[0]}" "batch job" "${pids[1]}"
echo "Without slicing, each program gets whatever the time-slicer gives it and may take all the memory."
wait "${pids[@]}"
pids=()

echo
echo "== The same programs under libslice (slice-run): each team a tenant with a memory cap and a share =="
export SLICE_COORDINATOR_DIR="$work/coordinator"
run="$root/build/bin/slice-run"
echo "   inference server: cap 8 GiB, asks 6 GiB, 30% of the GPU;  batch job: cap 8 GiB, asks 12 GiB, 70%"
"$run" --memory 8Gi --compute 30 --tenant inference -- "$load" --seconds 8 --alloc-mib 6144 --kernel-us 1000 \
  > "$work/inference.out" & pids+=($!)
for _ in $(seq 100); do grep -q ready "$work/inference.out" 2>/dev/null && break; sleep 0.05; done
if "$run" --memory 8Gi --compute 70 --tenant batch -- "$load" --seconds 1 --alloc-mib 12288 > /dev/null 2> "$work/batch.err"; then
  echo "   the batch job got 12 GiB past its 8 GiB cap: this should not happen"
else
  echo "   the batch job was refused; it saw:"
  sed 's/^/     /' "$work/batch.err"
fi
echo "   batch job again, asking 7 GiB within its cap:"
"$run" --memory 8Gi --compute 70 --tenant batch -- "$load" --seconds 6 --alloc-mib 7168 --kernel-us 10000 \
  > "$work/batch.out" & pids+=($!)
for _ in $(seq 100); do grep -q ready "$work/batch.out" 2>/dev/null && break; sleep 0.05; done
sleep 1.5
echo
measure 3 "inference server" "${pids[0]}" "batch job" "${pids[1]}"
echo
"$root/build/bin/slicectl" status
echo
echo "Each tenant is held to its cap on every allocation path (cuMemGetInfo and NVML show it its slice),"
echo "and receives its share of device time whatever the length of its kernels."
wait "${pids[@]}"
pids=()
