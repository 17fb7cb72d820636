#!/usr/bin/env bash
# The demo: installs what is missing, builds, then shares one GPU (the simulated one: its kernels take
# a chosen time, so the figures mean the same on every machine) between an "inference server" and a
# "batch job": first with nothing to slice it, then under libslice with memory caps and 30/70 shares,
# then with a third tenant, a "notebook", joining. Prints what each program saw and what the device
# really did (the simulator's own account), and `slicectl status`. Under a minute.
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
run="$root/build/bin/slice-run"

# start NAME ARGS...: runs ARGS in the background (output in $work/NAME.out/.err), waits for "ready".
start() {
  local name=$1
  shift
  "$@" > "$work/$name.out" 2> "$work/$name.err" & pids+=($!)
  eval "pid_${name}=$!"
  for _ in $(seq 200); do grep -q ready "$work/$name.out" 2>/dev/null && return 0; sleep 0.05; done
  echo "demo: $name did not start:"; cat "$work/$name.err"; exit 1
}

# measure SECONDS NAME:PID:TARGET...: each program's share of device time over SECONDS, from the
# simulator's own account (TARGET: its share of the shares in %, or - when it has none).
measure() {
  local seconds=$1 t0 t1
  shift
  t0=$(date +%s.%N); "$stat" --json > "$work/before.json"
  sleep "$seconds"
  t1=$(date +%s.%N); "$stat" --json > "$work/after.json"
  python3 - "$work/before.json" "$work/after.json" "$t0" "$t1" "$@" <<'PY'
import json, sys
before, after = (json.load(open(p))["devices"][0] for p in sys.argv[1:3])
window = float(sys.argv[4]) - float(sys.argv[3])
programs = [a.split(":") for a in sys.argv[5:]]
busy0 = {p["pid"]: p["busy_ns"] for p in before["processes"]}
now = {p["pid"]: p for p in after["processes"]}
print(f"  device time over {window:.1f} s, as the simulated GPU measured it:")
total = 0
for name, pid, target in programs:
    p = now.get(int(pid))
    if p is None:
        continue
    share = (p["busy_ns"] - busy0.get(p["pid"], 0)) / (window * 1e9)
    total += share
    aim = f"(target {float(target):4.1f}%)" if target != "-" else ""
    print(f"    {name:<18} {share:6.1%} {aim:<16} memory {p['memory_bytes'] / 2**30:5.1f} GiB")
print(f"    {'device busy':<18} {total:6.1%}")
PY
}

echo
echo "== 1. Two programs share one 24 GiB GPU with nothing to slice it (no libslice yet) =="
echo "   inference server: 6 GiB, 1 ms kernels;  batch job: 12 GiB, 10 ms kernels"
start inference "$load" --seconds 5 --alloc-mib 6144 --kernel-us 1000 --show-memory 1
start batch "$load" --seconds 5 --alloc-mib 12288 --kernel-us 10000 --show-memory 1
echo "   each program saw the whole GPU:"
echo "    inference server: $(head -1 "$work/inference.err")"
echo "    batch job:        $(head -1 "$work/batch.err")"
sleep 0.5
measure 3 "inference server:$pid_inference:-" "batch job:$pid_batch:-"
echo "   Without slicing, the GPU's time-slicer splits the time evenly, whatever each team was promised,"
echo "   and either program may take all the memory."
wait "${pids[@]}" 2>/dev/null || true
pids=()

echo
echo "== 2. The same programs under libslice (slice-run): each a tenant with a memory cap and a share =="
export SLICE_COORDINATOR_DIR="$work/coordinator"
echo "   inference server: cap 8 GiB, 30% of the GPU;  batch job: cap 8 GiB, 70%"
start inference "$run" --memory 8Gi --compute 30 --tenant inference -- \
  "$load" --seconds 30 --alloc-mib 6144 --kernel-us 1000 --show-memory 1
echo "    inference server: $(head -1 "$work/inference.err"); it allocated 6 GiB"
echo "   the batch job asks for 12 GiB, over its cap:"
if "$run" --memory 8Gi --compute 70 --tenant batch -- "$load" --seconds 1 --alloc-mib 12288 --show-memory 1 \
  > /dev/null 2> "$work/refused.err"; then
  echo "   the batch job got 12 GiB past its 8 GiB cap: this should not happen"
  exit 1
fi
sed 's/^/    batch job: /' "$work/refused.err"
echo "   the batch job again, asking 7 GiB within its cap:"
start batch "$run" --memory 8Gi --compute 70 --tenant batch -- \
  "$load" --seconds 30 --alloc-mib 7168 --kernel-us 10000 --show-memory 1
echo "    batch job: $(head -1 "$work/batch.err"); it allocated 7 GiB"
sleep 1.5
measure 3 "inference server:$pid_inference:30" "batch job:$pid_batch:70"

echo
echo "== 3. A third tenant joins: a notebook with a 4 GiB cap and a 20% share =="
start notebook "$run" --memory 4Gi --compute 20 --tenant notebook -- \
  "$load" --seconds 30 --alloc-mib 2048 --kernel-us 1000 --show-memory 1
echo "    notebook: $(head -1 "$work/notebook.err"); it allocated 2 GiB"
sleep 1.5
# The shares of the shares: 30/70/20 of 120.
measure 3 "inference server:$pid_inference:25" "batch job:$pid_batch:58.3" "notebook:$pid_notebook:16.7"
echo
"$root/build/bin/slicectl" status
echo
echo "Each tenant is held to its cap on every allocation path (cuMemGetInfo and NVML show it its slice),"
echo "and receives its share of device time whatever the length of its kernels; when one leaves, the"
echo "others take its time back. Live view: slicectl top; for Prometheus: slicectl metrics."
