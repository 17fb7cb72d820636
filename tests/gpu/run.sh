#!/usr/bin/env bash
# The checks that need a real NVIDIA GPU, in one run that must count: every check has a name and a
# timeout, everything it prints goes under the output folder, and a table and summary.json end it.
#   tests/gpu/run.sh [--bench] [--require-gpu] [--allow-missing] [--dry-run] [--out DIR]
#     --bench          also the figures: per-call costs with and without libslice, the cap's
#                      accuracy by NVML, CPU per busy process (about a minute more)
#     --require-gpu    no usable GPU is a failure (exit 1), not a note (exit 0)
#     --allow-missing  a framework that is not installed (torch, jax...) is a SKIP, not a FAIL
#     --dry-run        on a machine without a GPU: every step that needs none (the builds for sm_90,
#                      the carry's size, libslice loading, the driver-level checks on the simulated
#                      GPU, the Python checks compiled, the summary's format); part of scripts/test.sh
#     --out DIR        where logs, results.tsv, figures.tsv and summary.json go (default: $OUT when
#                      set, as on a device machine, else build/gpu-out); more than six files there
#                      are packed into logs.tar.gz
# libslice is built on another machine and carried: build/lib and build/bin, or build/gpu-carry
# (tests/gpu/prepare_carry.sh). Only the checks' own small programs are compiled here.
set -uo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD

bench=0 require_gpu=0 allow_missing=0 dry_run=0 out=${OUT:-}
while [ $# -gt 0 ]; do
  case $1 in
    --bench) bench=1 ;;
    --require-gpu) require_gpu=1 ;;
    --allow-missing) allow_missing=1 ;;
    --dry-run) dry_run=1 ;;
    --out) out=${2:?--out needs a folder}; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "tests/gpu/run.sh: unknown option $1 (--help)"; exit 2 ;;
  esac
  shift
done
[ -n "$out" ] || out=$repo/build/gpu-out
mkdir -p "$out/logs" "$out/bin" || { echo "tests/gpu/run.sh: cannot write $out"; exit 2; }
out=$(cd "$out" && pwd)
logs=$out/logs bin=$out/bin
: > "$out/results.tsv"
: > "$out/figures.tsv"
mode=gpu
[ $dry_run = 1 ] && mode=dry-run
started=$(date +%s)

# ---- recording ----
record() {  # record NAME STATUS SECONDS DETAIL
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4//$'\t'/ }" >> "$out/results.tsv"
  echo "== $1: $2 (${3} s) ${4:+- $4}"
}
figure() {  # figure SECTION NAME VALUE UNIT
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$out/figures.tsv"
}
skip() { record "$1" SKIP 0 "$2"; }
# check NAME TIMEOUT_S COMMAND...: a failure prints the log's last lines; the log stays in logs/.
check() {
  local name=$1 limit=$2 t0 rc status detail ms
  shift 2
  t0=$(date +%s%N)
  timeout -k 5 "$limit" "$@" > "$logs/$name.log" 2>&1
  rc=$?
  status=PASS
  if [ $rc = 124 ] || [ $rc = 137 ]; then status=TIMEOUT
  elif [ $rc = 3 ]; then status=SKIP
  elif [ $rc != 0 ]; then status=FAIL; fi
  detail=$(grep -v '^\s*$' "$logs/$name.log" | tail -n 1 | cut -c1-160)
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  record "$name" $status "$((ms / 1000)).$(( (ms % 1000) / 100 ))" "$detail"
  if [ $status = FAIL ] || [ $status = TIMEOUT ]; then tail -n 25 "$logs/$name.log" | sed 's/^/    /'; fi
  [ $status = PASS ] || [ $status = SKIP ]
}
value() { sed -n "s/^$1=//p" "$2" | tail -n 1; }  # value KEY FILE: the last KEY=... line's value

# ---- the toolkit, the GPU, the carried build ----
cuda_home=${CUDA_HOME:-}
if [ -z "$cuda_home" ] && command -v nvcc >/dev/null; then cuda_home=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")"); fi
[ -n "$cuda_home" ] || cuda_home=/usr/local/cuda
nvcc=$cuda_home/bin/nvcc
if [ ! -x "$nvcc" ] || [ ! -f "$cuda_home/include/cuda.h" ]; then
  record toolkit FAIL 0 "no CUDA toolkit: neither CUDA_HOME, nor nvcc on the PATH, nor /usr/local/cuda has bin/nvcc and include/cuda.h"
  python3 tests/gpu/summarize.py "$out" "$mode"
  exit 1
fi
# The driver may live outside the loader's path (/usr/local/nvidia in containers).
for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
  if [ -e "$d/libcuda.so.1" ]; then export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
done
smi=$(command -v nvidia-smi || true)
for s in /usr/local/nvidia/bin/nvidia-smi /usr/bin/nvidia-smi; do [ -n "$smi" ] || { [ -x "$s" ] && smi=$s; }; done
# Link the driver API programs against the toolkit's stub, else the driver itself.
driver_link=()
if [ -e "$cuda_home/lib64/stubs/libcuda.so" ]; then driver_link=(-L"$cuda_home/lib64/stubs" -lcuda)
elif [ -e "$cuda_home/targets/x86_64-linux/lib/stubs/libcuda.so" ]; then driver_link=(-L"$cuda_home/targets/x86_64-linux/lib/stubs" -lcuda)
else
  libcuda=$(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 /{print $NF; exit}')
  [ -n "$libcuda" ] && driver_link=(-L"$(dirname "$libcuda")" -l:libcuda.so.1)
fi
carried() {  # carried RELATIVE_PATH: build/ first, then build/gpu-carry/
  if [ -e "build/$1" ]; then echo "$repo/build/$1"; elif [ -e "build/gpu-carry/$1" ]; then echo "$repo/build/gpu-carry/$1"; fi
}
slice=$(carried lib/libslice.so)
slicectl=$(carried bin/slicectl)
plugin=$(carried bin/slice-device-plugin)
arch=sm_90
if [ $dry_run = 0 ] && [ -n "$smi" ]; then
  cc=$("$smi" --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
  [ -n "$cc" ] && arch=sm_$cc
fi
echo "tests/gpu ($mode): toolkit $cuda_home, arch $arch, libslice ${slice:-missing}, output $out"

# ---- build the checks' programs (in parallel; each with a timeout) ----
build_all() {
  local pids=() f
  cxx=(g++ -std=c++20 -O2 -I"$cuda_home/include")
  timeout 300 "${cxx[@]}" tests/gpu/preflight.cpp -o "$bin/preflight" -ldl > "$logs/build-preflight.log" 2>&1 & pids+=($!)
  timeout 300 "${cxx[@]}" tests/gpu/procaddr_real.cpp -o "$bin/procaddr_real" -ldl > "$logs/build-procaddr-real.log" 2>&1 & pids+=($!)
  timeout 300 "${cxx[@]}" -Ishim -Itests/shim tests/shim/procaddr_replay.cpp -o "$bin/procaddr_replay" -ldl > "$logs/build-procaddr-replay.log" 2>&1 & pids+=($!)
  timeout 300 "${cxx[@]}" tests/gpu/driver_cap.cpp -o "$bin/driver_cap" "${driver_link[@]}" > "$logs/build-driver-cap.log" 2>&1 & pids+=($!)
  timeout 300 "${cxx[@]}" tests/gpu/bench_calls.cpp -o "$bin/bench_calls" "${driver_link[@]}" > "$logs/build-bench-calls.log" 2>&1 & pids+=($!)
  for f in runtime_cap spin_share capture_threads; do
    timeout 300 "$nvcc" -O2 -std=c++20 -arch="$arch" "tests/gpu/$f.cu" -o "$bin/$f" > "$logs/build-$f.log" 2>&1 & pids+=($!)
  done
  local failed=0
  for p in "${pids[@]}"; do wait "$p" || failed=1; done
  return $failed
}
t0=$(date +%s)
if build_all; then
  record build PASS $(( $(date +%s) - t0 )) "8 programs for $arch"
else
  record build FAIL $(( $(date +%s) - t0 )) "$(cd "$logs" && grep -l -E 'error|rror:' build-*.log | tr '\n' ' ')"
  for f in "$logs"/build-*.log; do grep -m3 -E "error" "$f" | sed "s|^|    $(basename "$f"): |"; done
fi
python3 - "$repo/tests/gpu/frameworks" > "$logs/python-compile.log" 2>&1 <<'PY'
import pathlib, sys
files = sorted(pathlib.Path(sys.argv[1]).glob("*.py"))
for f in files:  # compiled in memory: nothing is written next to the sources
    compile(f.read_text(), str(f), "exec")
print(f"{len(files)} Python checks compile")
PY
if [ $? = 0 ]; then record python-compile PASS 0 "$(tail -1 "$logs/python-compile.log")"; else record python-compile FAIL 0 "$(tail -1 "$logs/python-compile.log")"; fi

# ---- preflight: libslice loads; a CUDA process works; NVML sees this machine's PIDs ----
work=$(mktemp -d "${TMPDIR:-/tmp}/slice-gpu.XXXXXX")
trap 'rm -rf "$work"' EXIT
coordinator=$work/coordinator
slice_ok=0
if [ -z "$slice" ]; then
  record preflight-libslice FAIL 0 "libslice.so is not here: carry build/ or build/gpu-carry (tests/gpu/prepare_carry.sh)"
elif LD_PRELOAD=$slice /bin/true 2> "$logs/preflight-libslice.log" && [ ! -s "$logs/preflight-libslice.log" ]; then
  slice_ok=1
  record preflight-libslice PASS 0 "loads in a plain process (needs $(objdump -T "$slice" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -V | tail -1), $(objdump -T "$slice" 2>/dev/null | grep -o 'GLIBCXX_[0-9.]*' | sort -V | tail -1))"
else
  record preflight-libslice FAIL 0 "libslice.so does not load here: $(head -1 "$logs/preflight-libslice.log")"
fi

if [ $dry_run = 1 ]; then
  # No GPU: the driver-level checks on the simulated one, to prove the checks' own logic.
  sim=$repo/build/simgpu
  if [ -e "$sim/libcuda.so.1" ] && [ $slice_ok = 1 ]; then
    export SIMGPU_STATE=$work/simgpu SIMGPU_MEMORY=8Gi
    check preflight-simulated 60 env LD_LIBRARY_PATH="$sim" LD_PRELOAD="$slice" SLICE_COORDINATOR_DIR="$coordinator" \
      "$bin/preflight"
    check driver-cap-simulated 120 env LD_LIBRARY_PATH="$sim" LD_PRELOAD="$slice" SLICE_COORDINATOR_DIR="$coordinator" \
      SLICE_MEMORY_LIMIT=$((2 << 30)) SLICE_TENANT=dry-run "$bin/driver_cap" $((2 << 30)) 0
    check procaddr-libslice-simulated 60 env LD_LIBRARY_PATH="$sim" LD_PRELOAD="$slice" \
      SLICE_COORDINATOR_DIR="$coordinator" "$bin/procaddr_replay" "$slice" tests/data/cudart13-procaddr-lookups.tsv
  else
    skip driver-checks-simulated "the simulated GPU (build/simgpu) or libslice is not built"
  fi
  # What travels to a GPU machine must fit the device tool's 64 MiB.
  if tests/gpu/prepare_carry.sh > "$logs/carry.log" 2>&1; then
    mib=$(du -sm build/gpu-carry | cut -f1)
    if [ "$mib" -lt 64 ]; then record carry-size PASS 0 "build/gpu-carry is $mib MiB (limit 64)"
    else record carry-size FAIL 0 "build/gpu-carry is $mib MiB, over the 64 MiB a device run carries"; fi
  else
    record carry-size FAIL 0 "$(tail -1 "$logs/carry.log")"
  fi
else
  check preflight-gpu 120 "$bin/preflight"
  gpu_ok=$?
  if [ $gpu_ok != 0 ]; then
    python3 tests/gpu/summarize.py "$out" "$mode"
    echo "tests/gpu: no usable GPU here ($(tail -1 "$logs/preflight-gpu.log"))"
    exit $require_gpu
  fi
  [ -n "$smi" ] && "$smi" -L | head -8
  uuid0=$(sed -n 's/^device0=[^|]*|\([^|]*\)|.*/\1/p' "$logs/preflight-gpu.log")
  card_total=$(value total_bytes "$logs/preflight-gpu.log")
  # Can NVML see this process? (Sandboxes with a PID namespace NVML does not know cannot.) Then the
  # context's own memory is measured and charged; otherwise the cap checks do not expect it.
  context_charged=0
  if [ -n "$smi" ]; then
    "$bin/spin_share" busy 1000 0 3 > /dev/null 2>&1 &
    holder=$!
    sleep 2
    "$smi" --query-compute-apps=pid --format=csv,noheader > "$logs/smi-pids.log" 2>&1
    grep -qx "$holder" "$logs/smi-pids.log" && context_charged=1
    wait $holder
  fi
  record nvml-sees-pids PASS 0 "$([ $context_charged = 1 ] && echo "yes: context memory is measured" || echo "no: context memory is not measurable here")"
  # The same CUDA process under libslice with a 1 GiB cap: the coordinator works here and the cap is
  # what the process is told. Every check under libslice depends on it.
  if [ $slice_ok = 1 ]; then
    preflight_slice() {
      env LD_PRELOAD="$slice" SLICE_COORDINATOR_DIR="$coordinator" SLICE_TENANT=preflight \
        SLICE_MEMORY_LIMIT=$((1 << 30)) "$bin/preflight" || return 1
      local total
      total=$(sed -n 's/^total_bytes=//p' "$logs/preflight-libslice-gpu.log" 2>/dev/null | tail -1)
      [ -z "$total" ] || [ "$total" = $((1 << 30)) ] || { echo "preflight=FAIL told a total of $total bytes, not the 1 GiB cap"; return 1; }
    }
    check preflight-libslice-gpu 120 preflight_slice || {
      slice_ok=0
      echo "tests/gpu: libslice does not work with this GPU ($(tail -1 "$logs/preflight-libslice-gpu.log")): the checks under it are left out"
    }
  fi
fi

# ---- the checks on the real GPU ----
if [ $dry_run = 0 ] && [ $slice_ok = 1 ]; then
  cap=$((2 << 30))
  under=(env LD_PRELOAD="$slice" SLICE_COORDINATOR_DIR="$coordinator")
  neighbour() {  # neighbour SECONDS: a busy tenant of its own beside the check (its pid in $neighbour_pid)
    "${under[@]}" SLICE_TENANT=neighbour SLICE_COMPUTE_SHARE=50 "$bin/spin_share" busy 1000 0 "$1" > "$logs/neighbour.log" 2>&1 &
    neighbour_pid=$!
    sleep 1
  }
  # 1. cuGetProcAddress: the driver's own answers, then libslice's answers on this driver.
  check procaddr-real 60 "$bin/procaddr_real" tests/data/cudart13-procaddr-lookups.tsv
  procaddr_slice() {
    "${under[@]}" SLICE_LOG_FILE="$logs/procaddr-libslice-trace.log" "$bin/procaddr_replay" "$slice" \
      tests/data/cudart13-procaddr-lookups.tsv || return 1
    ! grep -q "libslice does not know" "$logs/procaddr-libslice-trace.log"
  }
  check procaddr-libslice 60 procaddr_slice
  # 2. Every allocation path at the cap: the driver API, the runtime; a card chosen by UUID.
  check driver-cap 180 "${under[@]}" SLICE_TENANT=driver-cap SLICE_MEMORY_LIMIT=$cap "$bin/driver_cap" $cap $context_charged
  key=$(echo "${uuid0#GPU-}" | tr - _)
  check one-card-by-uuid 180 "${under[@]}" SLICE_TENANT=by-uuid CUDA_VISIBLE_DEVICES="$uuid0" \
    "SLICE_MEMORY_LIMIT_GPU_$key=$cap" "$bin/driver_cap" $cap $context_charged
  runtime_cap() {
    "${under[@]}" SLICE_TENANT=runtime-cap SLICE_MEMORY_LIMIT=$cap SLICE_LOG_LEVEL=trace \
      SLICE_LOG_FILE="$logs/runtime-trace.log" "$bin/runtime_cap" $cap || return 1
    echo "launch entry points the runtime fetched:"
    grep -o 'cuGetProcAddress: cu[A-Za-z]*Launch[A-Za-z_]*[^;]*' "$logs/runtime-trace.log" | sort -u | head -20
    # libslice's own lines: refusals are warnings; nothing at error level.
    ! grep -q ' error: ' "$logs/runtime-trace.log"
  }
  check runtime-cap 180 runtime_cap
  # 3. Stream capture on three threads beside a busy neighbour, with a share set.
  neighbour 30
  check capture-threads 120 "${under[@]}" SLICE_TENANT=capture SLICE_COMPUTE_SHARE=50 "$bin/capture_threads"
  kill "$neighbour_pid" 2>/dev/null; wait "$neighbour_pid" 2>/dev/null
  # 4. 30/70 shares, kernels of 0.1, 1 and 10 ms timed by %globaltimer, plainly and as graphs, both
  #    measured over one window.
  shares() {  # shares KERNEL_US MODE
    local start=$(( $(date +%s%N) + 2000000000 )) a b
    "${under[@]}" SLICE_TENANT="share-a-$1-$2" SLICE_COMPUTE_SHARE=30 "$bin/spin_share" busy "$1" $start 4 "$2" > "$work/a.out" 2>&1 &
    a=$!
    "${under[@]}" SLICE_TENANT="share-b-$1-$2" SLICE_COMPUTE_SHARE=70 "$bin/spin_share" busy "$1" $start 4 "$2" > "$work/b.out" 2>&1 &
    b=$!
    wait $a || { cat "$work/a.out"; return 1; }
    wait $b || { cat "$work/b.out"; return 1; }
    python3 - "$work/a.out" "$work/b.out" "$1" "$2" "$out/figures.tsv" <<'PY'
import sys
def dev(p): return float([l.split("=")[1] for l in open(p) if l.startswith("device_s=")][0])
a, b = dev(sys.argv[1]), dev(sys.argv[2])
share = a / (a + b) if a + b else 0
print(f"30/70 with {sys.argv[3]} us kernels ({sys.argv[4]}): {a:.3f} s / {b:.3f} s of device time, the 30% tenant got {share:.3f}, busy {(a + b) / 4:.2f}")
open(sys.argv[5], "a").write(f"shares\t30/70 {sys.argv[3]} us {sys.argv[4]}: 30% tenant\t{share:.3f}\tof the device\n")
sys.exit(0 if abs(share - 0.30) <= 0.05 else 1)
PY
  }
  for us in 100 1000 10000; do
    for m in plain graph; do check "shares-${us}us-$m" 60 shares $us $m; done
  done
  # 5. A high-priority server beside a busy tenant: its p99, with and without priority.
  serve() {  # serve LABEL ENV...
    local label=$1
    shift
    "${under[@]}" SLICE_TENANT="server-$label" "$@" "$bin/spin_share" serve 1000 300 2000 > "$work/serve-$label.out" 2>&1 || return 1
    figure priority "server p99, $label" "$(value p99_us "$work/serve-$label.out")" us
  }
  priority() {
    serve alone || return 1
    neighbour 40
    serve normal SLICE_PRIORITY=normal && serve high SLICE_PRIORITY=high
    local rc=$?
    kill "$neighbour_pid" 2>/dev/null; wait "$neighbour_pid" 2>/dev/null
    [ $rc = 0 ] || return 1
    local alone normal high
    alone=$(value p99_us "$work/serve-alone.out") normal=$(value p99_us "$work/serve-normal.out") high=$(value p99_us "$work/serve-high.out")
    echo "p99: alone $alone us, beside a busy tenant $normal us, with SLICE_PRIORITY=high $high us"
    [ "${high%.*}" -lt "${normal%.*}" ]
  }
  check priority 120 priority
  # 6. Real frameworks in this image's own python3, each under a cap.
  py=(python3)
  flags=()
  [ $allow_missing = 1 ] && flags=(--allow-missing)
  fw=tests/gpu/frameworks
  for mode_name in caching expandable async; do
    check "torch-$mode_name" 120 "${under[@]}" SLICE_TENANT="torch-$mode_name" SLICE_MEMORY_LIMIT=$((4 << 30)) \
      "${py[@]}" $fw/torch_checks.py --mode $mode_name "${flags[@]}"
  done
  neighbour 90
  check torch-graph 120 "${under[@]}" SLICE_TENANT=torch-graph SLICE_MEMORY_LIMIT=$((4 << 30)) SLICE_COMPUTE_SHARE=50 \
    "${py[@]}" $fw/torch_checks.py --mode graph "${flags[@]}"
  kill "$neighbour_pid" 2>/dev/null; wait "$neighbour_pid" 2>/dev/null
  transformers_shares() {
    local start=$(( $(date +%s) + 25 )) a b
    "${under[@]}" SLICE_TENANT=lm-a SLICE_COMPUTE_SHARE=30 SLICE_MEMORY_LIMIT=$((4 << 30)) "${py[@]}" $fw/transformers_shares.py \
      --seconds 20 --start-at $start "${flags[@]}" > "$work/lm-a.out" 2>&1 &
    a=$!
    "${under[@]}" SLICE_TENANT=lm-b SLICE_COMPUTE_SHARE=70 SLICE_MEMORY_LIMIT=$((4 << 30)) "${py[@]}" $fw/transformers_shares.py \
      --seconds 20 --start-at $start "${flags[@]}" > "$work/lm-b.out" 2>&1 &
    b=$!
    wait $a; local ra=$?
    wait $b; local rb=$?
    cat "$work/lm-a.out" "$work/lm-b.out" | grep -v '^\s*$' | tail -6
    [ $ra = 3 ] && [ $rb = 3 ] && return 3
    [ $ra = 0 ] && [ $rb = 0 ] || return 1
    python3 - "$work/lm-a.out" "$work/lm-b.out" "$out/figures.tsv" <<'PY'
import json, sys
def rate(p): return json.loads([l for l in open(p) if l.startswith("RESULT ")][-1][7:])["tokens_per_s"]
a, b = rate(sys.argv[1]), rate(sys.argv[2])
share = a / (a + b)
print(f"tokens/s: 30% tenant {a:.0f}, 70% tenant {b:.0f}: the 30% tenant got {share:.3f}")
open(sys.argv[3], "a").write(f"shares\ttransformers 30/70: 30% tenant's tokens\t{share:.3f}\tof the tokens\n")
sys.exit(0 if abs(share - 0.30) <= 0.10 else 1)
PY
  }
  check transformers-shares 120 transformers_shares
  check jax-preallocation 90 "${under[@]}" SLICE_TENANT=jax SLICE_MEMORY_LIMIT=$((4 << 30)) "${py[@]}" $fw/jax_check.py "${flags[@]}"
  check cupy-pool 90 "${under[@]}" SLICE_TENANT=cupy SLICE_MEMORY_LIMIT=$((4 << 30)) "${py[@]}" $fw/cupy_check.py "${flags[@]}"
  check numba 90 "${under[@]}" SLICE_TENANT=numba SLICE_MEMORY_LIMIT=$((4 << 30)) "${py[@]}" $fw/numba_check.py "${flags[@]}"
  check nvml-nvidia-smi 60 "${under[@]}" SLICE_TENANT=nvml SLICE_MEMORY_LIMIT=$((4 << 30)) "${py[@]}" $fw/nvml_check.py "${flags[@]}"
  check two-processes-one-tenant 120 "${under[@]}" SLICE_TENANT=pair SLICE_MEMORY_LIMIT=$((8 << 30)) \
    "${py[@]}" $fw/two_procs_one_tenant.py "${flags[@]}"
  check percent-cap 90 "${under[@]}" SLICE_TENANT=percent SLICE_MEMORY_LIMIT=25% "${py[@]}" $fw/percent_cap.py "${flags[@]}"
  # 7. Clean exits: processes that end straight after launching, the watcher against the runtime's
  #    teardown.
  clean_exits() {
    for i in 1 2 3 4 5; do
      "${under[@]}" SLICE_TENANT="exit-$i" "$bin/spin_share" busy 100 0 0.3 > "$work/exit.out" 2>&1 || { cat "$work/exit.out"; return 1; }
      ! grep -qiE 'crash|signal' "$work/exit.out" || { cat "$work/exit.out"; return 1; }
    done
    echo "5 processes exited cleanly"
  }
  check clean-exits 60 clean_exits
  # 8. The Kubernetes device plugin against the real NVML (its gRPC libraries on its path alone).
  if [ -n "$plugin" ]; then
    plugin_libs=$(dirname "$(dirname "$plugin")")/runtime-libs
    plugin_list() {
      LD_LIBRARY_PATH="$plugin_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$plugin" --list --slices 4 > "$work/plugin-list.txt" || return 1
      "$smi" --query-gpu=uuid,memory.total --format=csv,noheader,nounits > "$work/smi.csv" || return 1
      python3 - "$work/plugin-list.txt" "$work/smi.csv" <<'PY'
import re, sys
listing = open(sys.argv[1]).read()
gpus = [l.split(", ") for l in open(sys.argv[2]).read().splitlines() if l.strip()]
ids = re.findall(r"^  (\S+)$", listing, re.M)
assert len(ids) == 4 * len(gpus), f"{len(ids)} slices for {len(gpus)} GPUs"
for uuid, mib in gpus:
    assert [f"{uuid}::{k}" for k in range(4)] == [i for i in ids if i.startswith(uuid)], uuid
    m = re.search(re.escape(uuid) + r" .*?: (\d+) bytes, 4 slices of (\d+) bytes", listing)
    total, per_slice = int(m.group(1)), int(m.group(2))
    assert abs(total // 2**20 - int(mib)) <= 1, (total, mib)
    assert per_slice == total // 4 // 2**20 * 2**20, per_slice
print(f"{len(ids)} slices on {len(gpus)} GPUs: IDs, UUIDs and memory per slice match nvidia-smi")
PY
    }
    check device-plugin-list 60 plugin_list
  else
    skip device-plugin-list "slice-device-plugin was not carried"
  fi
  # 9. What slicectl says at the end.
  if [ -n "$slicectl" ]; then
    check status-json 30 bash -c "'$slicectl' status --json --coordinator '$coordinator' > '$work/status.json' && python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(len(d[\"devices\"]), \"devices in slicectl status --json\"); sys.exit(0 if d[\"devices\"] else 1)' '$work/status.json'"
  else
    skip status-json "slicectl was not carried"
  fi
  # --bench: per-call costs alternately with and without libslice, the cap's accuracy, CPU.
  if [ $bench = 1 ]; then
    calls() {
      local side
      for round in 1 2 3 4 5; do
        for side in without with; do
          if [ $side = with ]; then "${under[@]}" SLICE_TENANT=bench-calls "$bin/bench_calls" 10 >> "$work/calls-$side.out" || return 1
          else "$bin/bench_calls" 10 >> "$work/calls-$side.out" || return 1; fi
        done
      done
      python3 - "$work" "$out/figures.tsv" <<'PY'
import statistics, sys
def med(side, key):
    return statistics.median(float(l.split("=")[1]) for l in open(f"{sys.argv[1]}/calls-{side}.out") if l.startswith(key + "="))
with open(sys.argv[2], "a") as f:
    for key, label in (("launch_ns", "cuLaunchKernel"), ("alloc_free_ns", "cuMemAlloc + cuMemFree")):
        a, b = med("without", key), med("with", key)
        print(f"{label}: {a:.0f} ns without, {b:.0f} ns with libslice: {b - a:+.0f} ns")
        f.write(f"per call\t{label}: without\t{a:.0f}\tns\nper call\t{label}: with libslice\t{b:.0f}\tns\n")
PY
    }
    check bench-calls 180 calls
    cap_accuracy() {  # what a process filled to the cap really holds, by nvidia-smi
      "${under[@]}" SLICE_TENANT=accuracy SLICE_MEMORY_LIMIT=$cap "$bin/driver_cap" $cap $context_charged > "$work/acc.out" 2>&1 &
      local p=$! held=0
      for _ in $(seq 100); do
        m=$("$smi" --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null | awk -F', ' -v p=$p '$1==p {print $2}')
        [ -n "$m" ] && [ "$m" -gt "$held" ] && held=$m
        kill -0 $p 2>/dev/null || break
        sleep 0.1
      done
      wait $p
      echo "the most a capped process held by nvidia-smi: $held MiB of a $((cap >> 20)) MiB cap"
      figure "cap accuracy" "held at most, of a $((cap >> 20)) MiB cap" "$held" MiB
      [ "$held" -le $(( (cap >> 20) + 2 )) ]
    }
    if [ $context_charged = 1 ]; then check cap-accuracy 120 cap_accuracy; else skip cap-accuracy "nvidia-smi cannot see this process"; fi
    cpu() {  # CPU of a busy process of 1 ms kernels for 5 s, without and with libslice
      "$bin/spin_share" busy 1000 0 5 > "$work/cpu-without.out" || return 1
      "${under[@]}" SLICE_TENANT=cpu "$bin/spin_share" busy 1000 0 5 > "$work/cpu-with.out" || return 1
      for side in without with; do
        c=$(python3 -c "import sys; d=dict(l.strip().split('=') for l in open(sys.argv[1]) if '=' in l); print(f'{(float(d[\"cpu_user_s\"])+float(d[\"cpu_sys_s\"]))/5*100:.1f}')" "$work/cpu-$side.out")
        echo "busy process, $side libslice: $c% of a core"
        figure cpu "busy process, $side libslice" "$c" "% of a core"
      done
    }
    check cpu 60 cpu
  fi
fi

if [ $dry_run = 0 ] && [ $slice_ok = 0 ]; then
  skip checks-under-libslice "libslice failed its preflight (above): nothing under it was run"
fi

# ---- the end: the table, summary.json, and the logs packed when they are many ----
echo
python3 tests/gpu/summarize.py "$out" "$mode"
rc=$?
echo "total time: $(( $(date +%s) - started )) s"
if [ "$(find "$out/logs" -type f | wc -l)" -gt 6 ]; then
  tar -czf "$out/logs.tar.gz" -C "$out" logs && rm -rf "$out/logs"
fi
rm -rf "$bin"
exit $rc
