#!/usr/bin/env bash
# The checks that need a real NVIDIA GPU, in one run that must count: every check has a name and a
# time limit inside one overall budget, what it prints stays under the output folder, and a table
# and summary.json end the run whatever happens (an early exit, a signal).
#   tests/gpu/run.sh [--bench] [--require-gpu] [--allow-missing] [--dry-run] [--out DIR]
#     --bench          also the figures: per-call costs with and without libslice (processes of
#                      each, alternately), the system calls libslice adds per call, the cap's
#                      accuracy by nvidia-smi, CPU per busy process (about a minute more)
#     --require-gpu    no usable GPU is a failure (exit 1), not a note (exit 0)
#     --allow-missing  a framework that is not installed (torch, jax...) is a SKIP, not a FAIL
#     --dry-run        on a machine without a GPU: every step that needs none (the builds for sm_90,
#                      the check machinery itself, spin_share's arguments, the whole GPU path on
#                      stand-in programs (tests/gpu/fakes), Python crashing there, the driver-level
#                      checks, the Python preflight and the system call counts on the simulated GPU,
#                      the system call counter on a program of known calls, the judgements on made-up
#                      figures, the Python checks compiled, the carry's size, the summary);
#                      ctest gpu_run_dry_run
#     --out DIR        where results.tsv, figures.tsv, summary.json and the logs go (default: $OUT
#                      when set, as on a device machine, else build/gpu-out); more than 8 files
#                      there are packed into logs.tar.gz, so at most 4 remain
# Environment: GPU_BUDGET (seconds for the whole run, default 500: a device command gets 600);
# GPU_BUILD_JOBS (parallel compilations, default the number of cores, at most 8).
# On a device machine: tests/gpu/run.sh --require-gpu --bench, carrying build/gpu-carry
# (docs/real-gpu.md). libslice is built on another machine and carried: build/lib and build/bin, or
# build/gpu-carry (tests/gpu/prepare_carry.sh). Only the checks' own small programs are compiled here.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
repo=$PWD
# No core files: a crashed CUDA process's would be gigabytes, written inside the run's time, and
# there is no debugger on a device machine to read them. The crash is reported by its signal.
ulimit -c 0

bench=0 require_gpu=0 allow_missing=0 dry_run=0 out=${OUT:-}
while [ $# -gt 0 ]; do
  case $1 in
    --bench) bench=1 ;;
    --require-gpu) require_gpu=1 ;;
    --allow-missing) allow_missing=1 ;;
    --dry-run) dry_run=1 ;;
    --out) out=${2:?--out needs a folder}; shift ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "tests/gpu/run.sh: unknown option $1 (--help)"; exit 2 ;;
  esac
  shift
done
[ -n "$out" ] || out=$repo/build/gpu-out
mkdir -p "$out" || { echo "tests/gpu/run.sh: cannot write $out"; exit 2; }
out=$(cd "$out" && pwd)
# Only this run's files: an earlier run's would be read as this one's.
rm -rf "$out/logs" "$out/logs.tar.gz" "$out/results.tsv" "$out/figures.tsv" "$out/summary.json"
mkdir -p "$out/logs" || { echo "tests/gpu/run.sh: cannot write $out/logs"; exit 2; }
logs=$out/logs results=$out/results.tsv figures_file=$out/figures.tsv
: > "$results"
: > "$figures_file"
# The programs and scratch files live in a temporary folder, removed at the end; what a check
# writes that could explain a failure goes under logs/ instead.
work=$(mktemp -d "${TMPDIR:-/tmp}/slice-gpu.XXXXXX") || { echo "tests/gpu/run.sh: no temporary folder"; exit 2; }
bin=$work/bin coordinator=$work/coordinator
mkdir -p "$bin"
mode=gpu
[ $dry_run = 1 ] && mode=dry-run
started=$(date +%s)
budget=${GPU_BUDGET:-500}
deadline=$((started + budget))
completed=0 finished=0 current='' interrupted='' quiet=0 last_status='' check_name='' check_limit=0
check_note=''  # set around checks whose failure may follow from an earlier one: their FAIL detail says so
background=()  # processes started outside a check and still running (compilations, a neighbour)

# ---- recording ----
record() {  # record NAME STATUS SECONDS DETAIL
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$(printf '%s' "${4:-}" | tr '\t\n' '  ')" >> "$results"
  [ $quiet = 1 ] || echo "== $1: $2 (${3} s)${4:+ - $4}"
}
figure() {  # figure SECTION NAME VALUE UNIT
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$figures_file"
}
skip() { record "$1" SKIP 0 "$2"; }
value() { sed -n "s/^$1=//p" "$2" 2>/dev/null | tail -n 1; }  # value KEY FILE: the last KEY=... line's value

# The end, however the run ends: the table and summary.json, the logs packed, the scratch removed.
finish() {
  local rc=$? summary_rc p files
  [ $finished = 1 ] && return
  finished=1
  trap - EXIT TERM INT
  [ -n "$current" ] && kill -TERM -- "-$current" 2>/dev/null  # a check cut short by a signal
  for p in ${background[@]+"${background[@]}"}; do kill "$p" 2>/dev/null; done
  if [ $completed = 0 ]; then
    record run.sh FAIL "$(($(date +%s) - started))" "stopped before its end (exit status $rc${interrupted:+, $interrupted})"
  fi
  echo
  python3 tests/gpu/summarize.py "$out" "$mode" "$(($(date +%s) - started))" "$budget"
  summary_rc=$?
  if [ $summary_rc -gt 1 ]; then
    echo "tests/gpu: summarize.py failed; the results as recorded:"
    cat "$results"
    summary_rc=1
  fi
  # A device run returns at most 8 files from under $OUT.
  if [ "$(find "$out" -type f | wc -l)" -gt 8 ]; then
    tar -czf "$out/logs.tar.gz" -C "$out" logs && rm -rf "$out/logs"
  fi
  files=$(find "$out" -type f | wc -l)
  if [ "$files" -gt 8 ]; then
    echo "tests/gpu: $files files under $out, more than the 8 a device run returns"
    summary_rc=1
  fi
  echo "total time: $(($(date +%s) - started)) s of a $budget s budget; under $out: $(cd "$out" && ls | tr '\n' ' ')"
  rm -rf "$work"
  exit $summary_rc
}
trap finish EXIT
trap 'interrupted=SIGTERM; exit 143' TERM
trap 'interrupted=SIGINT; exit 130' INT

# check NAME LIMIT COMMAND...: runs a program or a function of this script with a time limit (cut
# to what is left of the budget, less 20 s for the end; SKIP "out of time" under 10 s), its output
# in logs/NAME.log. Status: exit 0 PASS, 3 SKIP, a timeout TIMEOUT, else FAIL; and FAIL whenever a
# libslice error line is in logs/NAME.* (the check's log and the files it wrote beside it). The
# detail is a framework check's RESULT "why", else the log's last line; a check killed by a signal
# says which first, and with check_note set, a FAIL or TIMEOUT starts with "[NOTE]". The whole
# process group is killed at the limit (timeout signals its group), so nothing a check started
# outlives it.
check() {
  local name=$1 limit=$2 left t0 rc status detail ms errs why
  shift 2
  check_name=$name
  left=$((deadline - $(date +%s) - 20))
  if [ $left -lt 10 ]; then
    last_status=SKIP
    record "$name" SKIP 0 "out of time: $((left + 20)) s left of the $budget s budget"
    return 0
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  check_limit=$limit
  t0=$(date +%s%N)
  if declare -F "$1" > /dev/null; then
    # timeout runs programs, not shell functions: a function runs in a bash of its own that is
    # given this script's variables (arrays included) and functions.
    # shellcheck disable=SC2046  # one word per variable name
    { declare -p $(compgen -v | grep -E '^[a-z][a-z0-9_]*$'); declare -f; } > "$work/check.env" 2> /dev/null
    # What it started in the background and left running is stopped when it returns.
    timeout -k 5 "$limit" bash -c 'set -uo pipefail; source "$1" || exit 125; shift; "$@"; rc=$?
      for j in $(jobs -p); do kill "$j" 2> /dev/null; done; exit $rc' check-function \
      "$work/check.env" "$@" > "$logs/$name.log" 2>&1 < /dev/null &
  else
    timeout -k 5 "$limit" "$@" > "$logs/$name.log" 2>&1 < /dev/null &
  fi
  current=$!
  wait "$current"
  rc=$?
  current=
  case $rc in
    0) status=PASS ;;
    3) status=SKIP ;;
    124|137) status=TIMEOUT ;;
    *) status=FAIL ;;
  esac
  detail=
  errs=$(grep -hE 'libslice\[[0-9]+\] error: ' "$logs/$name".* 2> /dev/null | head -n 1)
  if [ -n "$errs" ] && [ $status != TIMEOUT ]; then
    status=FAIL
    detail="libslice logged an error: $errs"
  fi
  if [ -z "$detail" ]; then
    if grep -q '^RESULT {' "$logs/$name.log"; then why=$(python3 tests/gpu/judge.py result-why "$logs/$name.log" 2> /dev/null) && detail=$why; fi
    # Not bash's own report of a job a signal ended ("...: line N: PID Segmentation fault ..."): the
    # signal is named below, and the line before it says more.
    [ -n "$detail" ] || detail=$(grep -v '^\s*$' "$logs/$name.log" | grep -vE '^[^ ]+: line [0-9]+: +[0-9]+ ' | tail -n 1 | cut -c1-200)
    [ $status = TIMEOUT ] && detail="timed out after $limit s; last: $detail"
    [ $status = FAIL ] && [ $rc = 127 ] && detail="exit 127 (not built? not found?): $detail"
    # 128 + N: the program (or the last command of a function) was ended by signal N, a crash.
    if [ $status = FAIL ] && [ $rc -gt 128 ] && [ $rc -lt 160 ]; then
      detail="killed by SIG$(kill -l $((rc - 128)) 2> /dev/null) (exit $rc): $detail"
    fi
  fi
  if [ -n "$check_note" ] && { [ $status = FAIL ] || [ $status = TIMEOUT ]; }; then detail="[$check_note] $detail"; fi
  ms=$((($(date +%s%N) - t0) / 1000000))
  record "$name" $status "$((ms / 1000)).$(((ms % 1000) / 100))" "$detail"
  if [ $quiet = 0 ] && { [ $status = FAIL ] || [ $status = TIMEOUT ]; }; then
    tail -n 20 "$logs/$name.log" | cut -c1-300 | sed 's/^/    /'
  fi
  last_status=$status
  [ $status = PASS ] || [ $status = SKIP ]
}

# ---- the toolkit, the GPU's tools, the carried build ----
cuda_home=${CUDA_HOME:-}
if [ -z "$cuda_home" ] && command -v nvcc > /dev/null; then cuda_home=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")"); fi
[ -n "$cuda_home" ] || cuda_home=/usr/local/cuda
nvcc=$cuda_home/bin/nvcc
if [ ! -x "$nvcc" ] || [ ! -f "$cuda_home/include/cuda.h" ]; then
  record toolkit FAIL 0 "no CUDA toolkit: neither CUDA_HOME, nor nvcc on the PATH, nor /usr/local/cuda has bin/nvcc and include/cuda.h"
  completed=1
  exit 1
fi
# The driver and nvidia-smi may live outside the loader's path and the PATH (/usr/local/nvidia in
# containers): both are added, so that every later command (the Python checks' nvidia-smi too) finds them.
for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
  if [ -e "$d/libcuda.so.1" ]; then export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
done
smi=$(command -v nvidia-smi || true)
for s in /usr/local/nvidia/bin/nvidia-smi /usr/bin/nvidia-smi; do [ -n "$smi" ] || { [ -x "$s" ] && smi=$s; }; done
if [ -n "$smi" ]; then PATH="$(dirname "$smi"):$PATH" && export PATH; fi
# Link the driver API programs against the toolkit's stub, else the driver itself.
driver_link=()
for stubs in "$cuda_home/lib64/stubs" "$cuda_home/targets/x86_64-linux/lib/stubs" "$cuda_home/targets/sbsa-linux/lib/stubs"; do
  if [ ${#driver_link[@]} = 0 ] && [ -e "$stubs/libcuda.so" ]; then driver_link=(-L"$stubs" -lcuda); fi
done
if [ ${#driver_link[@]} = 0 ]; then
  libcuda=
  [ -e /usr/local/nvidia/lib64/libcuda.so.1 ] && libcuda=/usr/local/nvidia/lib64/libcuda.so.1
  [ -n "$libcuda" ] || libcuda=$(ldconfig -p 2> /dev/null | awk '/libcuda\.so\.1 /{print $NF; exit}')
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
  cc=$("$smi" --query-gpu=compute_cap --format=csv,noheader 2> /dev/null | head -1 | tr -d ' .')
  [[ $cc =~ ^[0-9]+$ ]] && arch=sm_$cc
fi
echo "tests/gpu ($mode): toolkit $cuda_home, arch $arch, libslice ${slice:-missing}, nvidia-smi ${smi:-missing}, budget $budget s, output $out"

# ---- the checks' programs, compiled in parallel, each with a time limit ----
build_jobs=${GPU_BUILD_JOBS:-$(nproc 2> /dev/null || echo 2)}
[ "$build_jobs" -gt 8 ] && build_jobs=8
[ "$build_jobs" -ge 1 ] || build_jobs=1
programs=0
build() {  # build NAME COMMAND...: in the background, its log in logs/build-NAME.log
  programs=$((programs + 1))
  while [ "$(jobs -rp | wc -l)" -ge "$build_jobs" ]; do wait -n; done
  (timeout 300 "${@:2}" > "$logs/build-$1.log" 2>&1 || echo "$1" >> "$work/build-failed") &
  background+=($!)
}
t0=$(date +%s)
cxx=(g++ -std=c++20 -O2 -I"$cuda_home/include")
build preflight "${cxx[@]}" tests/gpu/preflight.cpp -o "$bin/preflight" -ldl
build procaddr-real "${cxx[@]}" tests/gpu/procaddr_real.cpp -o "$bin/procaddr_real" -ldl
build procaddr-replay "${cxx[@]}" -Ishim -Itests/shim tests/shim/procaddr_replay.cpp -o "$bin/procaddr_replay" -ldl
build driver-cap "${cxx[@]}" tests/gpu/driver_cap.cpp -o "$bin/driver_cap" ${driver_link[@]+"${driver_link[@]}"}
build bench-calls "${cxx[@]}" tests/gpu/bench_calls.cpp -o "$bin/bench_calls" ${driver_link[@]+"${driver_link[@]}"}
build syscount g++ -std=c++20 -O2 -pthread tests/gpu/syscount.cpp -o "$bin/syscount"
build process-trace g++ -std=c++20 -O2 -pthread tests/shim/process_trace.cpp -o "$bin/process_trace" -ldl
build nvml-reentry "${cxx[@]}" tests/gpu/nvml_reentry.cpp -o "$bin/nvml_reentry" -ldl
build nvml-cycles "${cxx[@]}" -pthread tests/gpu/nvml_cycles.cpp -o "$bin/nvml_cycles" -ldl
build nvml-reentry-interposer "${cxx[@]}" -shared -fPIC tests/gpu/nvml_reentry_interposer.cpp \
  -o "$bin/libnvml_reentry_interposer.so" -ldl
for f in runtime_cap spin_share capture_threads; do
  build "${f//_/-}" "$nvcc" -O2 -std=c++20 -arch="$arch" "tests/gpu/$f.cu" -o "$bin/$f"
done
wait
background=()  # what finish stops: only what still runs
if [ ! -s "$work/build-failed" ]; then
  record build PASS $(($(date +%s) - t0)) "$programs programs for $arch ($build_jobs at a time)"
else
  record build FAIL $(($(date +%s) - t0)) "not built: $(tr '\n' ' ' < "$work/build-failed")"
  for f in $(cat "$work/build-failed"); do grep -m3 -E "error|rror:" "$logs/build-$f.log" | cut -c1-300 | sed "s|^|    build-$f: |"; done
fi
# System call names by number, from this machine's headers (syscount reports numbers): NUMBER<tab>NAME.
syscall_names=$work/syscall-names.tsv
printf '#include <sys/syscall.h>\n' | g++ -x c++ -dM -E - 2> /dev/null |
  sed -n 's/^#define __NR_\([A-Za-z0-9_]*\) \([0-9][0-9]*\)$/\2\t\1/p' | sort -n > "$syscall_names"
python3 - "$repo/tests/gpu" > "$logs/python-compile.log" 2>&1 << 'PY'
import pathlib, sys
root = pathlib.Path(sys.argv[1])
files = sorted(root.glob("*.py")) + sorted((root / "frameworks").glob("*.py")) + sorted((root / "fakes").glob("*.py"))
for f in files:  # compiled in memory: nothing is written next to the sources
    compile(f.read_text(), str(f), "exec")
print(f"{len(files)} Python files compile (the judgements, the summary, the framework checks, the stand-in)")
PY
if [ $? = 0 ]; then record python-compile PASS 0 "$(tail -1 "$logs/python-compile.log")"; else record python-compile FAIL 0 "$(tail -1 "$logs/python-compile.log")"; fi

# ---- libslice loads here ----
slice_ok=0
if [ -z "$slice" ]; then
  record preflight-libslice FAIL 0 "libslice.so is not here: carry build/ or build/gpu-carry (tests/gpu/prepare_carry.sh)"
elif LD_PRELOAD=$slice /bin/true 2> "$logs/preflight-libslice.log" && [ ! -s "$logs/preflight-libslice.log" ]; then
  slice_ok=1
  record preflight-libslice PASS 0 "loads in a plain process (needs $(objdump -T "$slice" 2> /dev/null | grep -o 'GLIBC_[0-9.]*' | sort -V | tail -1), $(objdump -T "$slice" 2> /dev/null | grep -o 'GLIBCXX_[0-9.]*' | sort -V | tail -1))"
else
  record preflight-libslice FAIL 0 "libslice.so does not load here: $(head -1 "$logs/preflight-libslice.log")"
fi

# ---- what the checks run, in both modes ----
# Every way this script runs spin_share (the dry run has each one parsed by the program itself).
spin_holder=(busy 1000 0 4)      # a process for nvidia-smi to list
spin_neighbour=(busy 1000 0 150) # a busy tenant beside a check, stopped when the check ends
spin_server=(serve 1000 300 2000)
spin_exit=(busy 100 0 0.3)       # clean exits
spin_cpu=(busy 1000 0 5)         # --bench: CPU of a busy process
spin_limit=(busy 1000 0 4 cooperative)  # a hard limit on cooperative launches
share_kernels=(100 1000 10000) share_kinds=(plain graph) share_window=4 share_lead_ms=5000
neighbour_settle_s=1             # a neighbour's head start
lm_solo=4 lm_joint=12 lm_lead=1  # transformers: seconds alone (each), together, before the first window
cap=$((4 << 30))  # the driver-level checks' cap: six 256 MiB IPC exports and the context fit under it
context_charged=0 unsupported='' uuid0='' bench_rounds=10
syscall_calls=1000  # bench_calls --count: launches, and alloc+free pairs, whose system calls are counted
flags=()
[ $allow_missing = 1 ] && flags=(--allow-missing)
# The Python preflight's steps, interpreter and flags (the dry run gives its own on the simulated GPU).
python=python3 python_steps=(ctypes cuda-bindings torch) python_flags=(${flags[@]+"${flags[@]}"}) python_note=''
fw=tests/gpu/frameworks
tsv=tests/data/cudart13-procaddr-lookups.tsv
if [ $dry_run = 1 ]; then
  sim=$repo/build/simgpu
  export SIMGPU_STATE=$work/simgpu SIMGPU_MEMORY=8Gi
  plain=(env LD_LIBRARY_PATH="$sim")
  under=(env LD_LIBRARY_PATH="$sim" LD_PRELOAD="$slice" SLICE_COORDINATOR_DIR="$coordinator")
  suffix=-simulated bench_rounds=2
else
  plain=(env)
  under=(env LD_PRELOAD="$slice" SLICE_COORDINATOR_DIR="$coordinator")
  suffix=
fi

# ---- helpers of the checks (functions run by check in a bash of their own) ----
neighbour_start() {  # neighbour_start LOG: a busy tenant of its own beside what follows
  "${under[@]}" SLICE_TENANT=neighbour SLICE_COMPUTE_SHARE=50 "$bin/spin_share" "${spin_neighbour[@]}" > "$1" 2>&1 &
  neighbour_pid=$!
  background+=("$neighbour_pid")
  sleep "$neighbour_settle_s"
}
neighbour_stop() { kill "$neighbour_pid" 2> /dev/null; wait "$neighbour_pid" 2> /dev/null; background=(); }
pyrun() {  # pyrun VAR=VALUE... -- SCRIPT ARGS...: a framework check under libslice, its watchdog inside the check's limit
  # PYRUN_PREFIX="COMMAND ARGS": python3 runs under that command (unshare ...)
  local envs=() prefix=() script
  while [ $# -gt 0 ] && [ "$1" != -- ]; do
    case $1 in
      PYRUN_PREFIX=*) read -ra prefix <<< "${1#PYRUN_PREFIX=}" ;;
      *) envs+=("$1") ;;
    esac
    shift
  done
  shift
  script=$1
  shift
  "${under[@]}" ${envs[@]+"${envs[@]}"} ${prefix[@]+"${prefix[@]}"} python3 "$fw/$script" "$@" \
    ${flags[@]+"${flags[@]}"} --timeout "$(watchdog_s)"
}
watchdog_s() { echo $((check_limit > 20 ? check_limit - 10 : check_limit / 2)); }  # a Python check's own, inside the limit
status_of() {  # status_of FILE: slicectl status --json into FILE
  "$slicectl" status --json --coordinator "$coordinator" > "$1"
}
tenant_seen() {  # tenant_seen TENANT: libslice measured device time for it (slicectl status --json)
  status_of "$logs/$check_name.status.json" && python3 tests/gpu/judge.py tenant-seconds "$logs/$check_name.status.json" "$1"
}

# ---- the driver-level checks, on the real GPU or (dry run) the simulated one ----
paths_probe() {  # each allocation path once, without libslice: what this driver (or sandbox) refuses
  "${plain[@]}" "$bin/driver_cap" --probe || return 1
  local u
  u=$(sed -n 's/^unsupported=//p' "$logs/$check_name.log" | tail -1)
  if [ -n "$u" ]; then echo "unsupported here even without libslice (left out of the cap checks): $u"
  else echo "every allocation path works here without libslice"; fi
}
procaddr_slice() {  # libslice's cuGetProcAddress answers, the rows left to the driver compared with its own answers
  local answers=() trace=$logs/$check_name.libslice.log
  [ -s "$logs/procaddr-real$suffix.answers.tsv" ] && answers=(--driver-answers "$logs/procaddr-real$suffix.answers.tsv")
  [ ${#answers[@]} = 0 ] && echo "note: no driver answers from procaddr-real; comparing with dlsym(export)"
  "${under[@]}" SLICE_LOG_FILE="$trace" "$bin/procaddr_replay" ${answers[@]+"${answers[@]}"} "$slice" "$tsv" || return 1
  ! grep -q "libslice does not know" "$trace" 2> /dev/null || { grep -m5 "libslice does not know" "$trace"; return 1; }
}
driver_checks() {
  check "procaddr-real$suffix" 60 "${plain[@]}" "$bin/procaddr_real" "$tsv" --answers "$logs/procaddr-real$suffix.answers.tsv"
  check "procaddr-libslice$suffix" 60 procaddr_slice
  check "driver-paths-probe$suffix" 60 paths_probe
  unsupported=$(value unsupported "$logs/driver-paths-probe$suffix.log")
  check "driver-cap$suffix" 180 "${under[@]}" SLICE_TENANT=driver-cap SLICE_MEMORY_LIMIT=$cap \
    "$bin/driver_cap" $cap $context_charged --unsupported "$unsupported"
  # The card by its UUID: the per-GPU cap must win over a smaller SLICE_MEMORY_LIMIT, and the IPC
  # child (given 1 GiB) must inherit neither.
  if [ -n "$uuid0" ]; then
    local key
    key=$(echo "${uuid0#GPU-}" | tr - _)
    check "one-card-by-uuid$suffix" 180 "${under[@]}" SLICE_TENANT=by-uuid CUDA_VISIBLE_DEVICES="$uuid0" \
      SLICE_MEMORY_LIMIT=$((1 << 30)) "SLICE_MEMORY_LIMIT_GPU_$key=$cap" "$bin/driver_cap" $cap $context_charged --unsupported "$unsupported"
  else
    skip "one-card-by-uuid$suffix" "no UUID from the preflight"
  fi
}
# Per-call costs: bench_rounds processes each way, alternately without and with libslice, so that a
# drift of the machine falls on both sides; each prints its medians. The judge reports each side's
# median and quartiles across processes, and the difference of the medians with its 90% interval:
# one process each way differs by more than libslice's cost (the first real run).
calls() {
  local _ side
  for _ in $(seq "$bench_rounds"); do
    for side in without with; do
      if [ $side = with ]; then "${under[@]}" SLICE_TENANT=bench-calls "$bin/bench_calls" 10 >> "$logs/$check_name.with.out" || return 1
      else "${plain[@]}" "$bin/bench_calls" 10 >> "$logs/$check_name.without.out" || return 1; fi
    done
  done
  python3 tests/gpu/judge.py calls "$logs/$check_name.without.out" "$logs/$check_name.with.out" "$figures_file"
}
# The system calls libslice makes per call, where there is no strace or perf: bench_calls --count N
# traced by syscount without and with libslice; the calling thread's calls in the launch phase and in
# the alloc+free phase, over N. The counter first counts its own probe, whose calls are known: a
# counter that miscounts here fails the check rather than give figures.
syscount_probe() {  # syscount_probe [--regs]: --regs, the fallback that reads registers (x86_64)
  local rc at=$logs/$check_name.probe${1:-}
  "$bin/syscount" -o "$at.tsv" "$@" -- "$bin/syscount" --probe 1000 > "$at.out" 2>&1
  rc=$?
  python3 tests/gpu/judge.py syscount-probe "$at.tsv" "$at.out" $rc
}
syscount_selftest() {  # both ways of reading a call's number; the registers where they can be (x86_64)
  local rc
  syscount_probe || return $?
  syscount_probe --regs
  rc=$?
  [ $rc = 3 ] && { echo "the register fallback (x86_64 only) is not checked here"; return 0; }
  return $rc
}
syscalls() {
  local rc
  syscount_probe || return $?
  "$bin/syscount" -o "$logs/$check_name.without.tsv" -- "${plain[@]}" "$bin/bench_calls" --count $syscall_calls \
    > "$logs/$check_name.without.out" 2>&1
  "$bin/syscount" -o "$logs/$check_name.with.tsv" -- "${under[@]}" SLICE_TENANT=bench-syscalls "$bin/bench_calls" \
    --count $syscall_calls > "$logs/$check_name.with.out" 2>&1
  # Their exit statuses are in the reports, which the judge reads.
  python3 tests/gpu/judge.py syscalls "$logs/$check_name.without.tsv" "$logs/$check_name.with.tsv" $syscall_calls \
    "$syscall_names" "$figures_file"
  rc=$?
  [ $rc = 1 ] && tail -n 3 "$logs/$check_name.without.out" "$logs/$check_name.with.out"
  return $rc
}
status_json() {  # what slicectl says at the end
  status_of "$logs/$check_name.json" || return 1
  python3 tests/gpu/judge.py status-json "$logs/$check_name.json"
}

# ---- the checks that need a GPU ----
# Can NVML see this machine's PIDs? (Sandboxes with a PID namespace NVML does not know cannot.) Then
# the context's own memory is measured and charged; otherwise the cap checks do not expect it.
nvml_sees_pids() {
  "$bin/spin_share" "${spin_holder[@]}" > "$logs/$check_name.holder.out" 2>&1 &
  local holder=$! seen=0 how i
  for i in 0 1 2 3 4 5 6; do
    [ $i = 0 ] || sleep 0.5
    if [ -n "$smi" ]; then
      how=nvidia-smi
      "$smi" --query-compute-apps=pid --format=csv,noheader > "$logs/$check_name.pids" 2>&1
    else
      how=pynvml
      python3 -c 'import pynvml as n
n.nvmlInit()
for i in range(n.nvmlDeviceGetCount()):
    for p in n.nvmlDeviceGetComputeRunningProcesses(n.nvmlDeviceGetHandleByIndex(i)): print(p.pid)' > "$logs/$check_name.pids" 2>&1
    fi
    grep -qx "$holder" "$logs/$check_name.pids" && { seen=1; break; }
  done
  wait "$holder" || { echo "the process to be listed failed: $(tail -1 "$logs/$check_name.holder.out")"; return 1; }
  echo "context_charged=$seen"
  if [ $seen = 1 ]; then echo "yes ($how lists this machine's PIDs): context memory is measured and charged"
  else echo "no ($how does not list PID $holder: $(head -c 200 "$logs/$check_name.pids" | tr '\n' ' ')): context memory is not measurable here"; fi
}
# Whether NVML calls its own entry points through the dynamic linker (no libslice): a library in
# front of it, where libslice stands, notes the calls that reach it from inside another. Where it
# does, libslice's hooks are re-entered from inside their own calls (issue 22: a lock held across
# nvmlInit hung the second device run at its first context). A fact about the driver: PASS either
# way, when NVML answered as it should (nvml_reentry.cpp).
nvml_reentry() {
  local said nested other
  said=$("${plain[@]}" "$bin/nvml_reentry" --interposer "$bin/libnvml_reentry_interposer.so" --context)
  local rc=$?
  echo "$said"
  [ $rc = 0 ] || { echo "NVML did not answer as it should (exit $rc), without libslice"; return 1; }
  nested=$(sed -n 's/^nested=//p' <<< "$said")
  other=$(sed -n 's/^other_threads=//p' <<< "$said")
  if [ "$nested" = none ]; then
    echo "no: NVML binds its calls of its own entry points itself (none reached a library in front of it); from its own threads: $other"
  else
    echo "yes: NVML calls its own entry points through the dynamic linker ($nested): hooks are re-entered; from its own threads: $other"
  fi
}
# What a start and a stop of NVML leave in a process (no libslice): keys, descriptors, threads and
# resident memory after the first of 200 cycles and after all, and the start times (issue 25: why
# libslice starts NVML once per process, docs/memory.md). A fact recorded: PASS when NVML answered.
nvml_cycles() {
  local said
  said=$("${plain[@]}" "$bin/nvml_cycles" 200) || { echo "$said"; return 1; }
  echo "$said"
  local k
  for k in first_cycle_keys first_cycle_descriptors first_cycle_threads all_cycles_keys all_cycles_descriptors \
    all_cycles_threads all_cycles_resident_kib first_start_ms later_start_median_ms; do
    figure nvml-cycles "$k" "$(sed -n "s/^$k=//p" <<< "$said")" ""
  done
  echo "200 starts of NVML left $(sed -n 's/^all_cycles_keys=//p' <<< "$said") keys, $(sed -n 's/^all_cycles_descriptors=//p' <<< "$said") descriptors, $(sed -n 's/^all_cycles_threads=//p' <<< "$said") threads (the first: $(sed -n 's/^first_cycle_keys=//p' <<< "$said"), $(sed -n 's/^first_cycle_descriptors=//p' <<< "$said"), $(sed -n 's/^first_cycle_threads=//p' <<< "$said"))"
}
# A hard limit of 40% on a tenant alone that launches cooperative kernels (issue 26).
limit_cooperative() {
  "${under[@]}" SLICE_TENANT=limit-cooperative SLICE_COMPUTE_LIMIT=40 "$bin/spin_share" "${spin_limit[@]}" \
    > "$logs/$check_name.out" 2>&1 || { cat "$logs/$check_name.out"; return 1; }
  python3 tests/gpu/judge.py limit "$logs/$check_name.out" 0.40 "$figures_file"
}
# Inside a PID namespace with a /proc of its own, as in a container (issue 26): NVML lists the host's
# PIDs; libslice must still find its process there and charge the context. runtime_view.py inside
# `unshare --pid --fork --mount-proc` (root only: a SKIP otherwise).
context_in_pid_namespace() {
  [ "$(id -u)" = 0 ] || { echo "not root: no PID namespace of its own can be made here"; return 3; }
  command -v unshare > /dev/null || { echo "no unshare here"; return 3; }
  # A shell is the namespace's first process (as a container's init), the check its child: the first
  # process of a PID namespace is not ended by a signal it sends itself.
  pyrun SLICE_TENANT=pid-namespace SLICE_MEMORY_LIMIT=$((4 << 30)) \
    PYRUN_PREFIX="unshare --pid --fork --mount-proc sh -c \"\$@\" sh" -- runtime_view.py
}
# The same program under libslice: a context, which libslice measures through NVML, then NVML
# started and ended twice by the program, and after its last nvmlShutdown NVML answers as to a
# program that never started it. Where this hangs, every check under libslice would: none is run.
# A run still going after 20 s is stopped here (exit 124: TIMEOUT), after its threads' kernel wait
# channels and its main thread's stack (SIGUSR1) are written down: no debugger on these machines.
nvml_under_slice() {
  local pid i rc
  "${under[@]}" SLICE_TENANT=nvml-reentry "$bin/nvml_reentry" --context &
  pid=$!
  for ((i = 0; i < 200; ++i)); do kill -0 $pid 2> /dev/null || break; sleep 0.1; done
  if kill -0 $pid 2> /dev/null; then
    echo "still running after 20 s; its threads:"
    for i in /proc/$pid/task/*; do echo "  ${i##*/} $(cat "$i/comm" 2> /dev/null) wchan=$(cat "$i/wchan" 2> /dev/null)"; done
    kill -USR1 $pid
    sleep 1
    kill -KILL $pid 2> /dev/null
    wait $pid
    echo "hung under libslice (killed after 20 s)"
    return 124
  fi
  wait $pid
  rc=$?
  [ $rc = 0 ] || return 1
  echo "under libslice: a context measured through NVML; the program's NVML started and ended twice; NVML_ERROR_UNINITIALIZED after its last nvmlShutdown"
}
# The same CUDA process under libslice with a 1 GiB cap: the coordinator works here and the cap is
# what the process is told. Every check under libslice depends on it.
preflight_slice() {
  local said total rc
  said=$("${under[@]}" SLICE_TENANT=preflight SLICE_MEMORY_LIMIT=$((1 << 30)) "$bin/preflight")
  rc=$?
  echo "$said"
  [ $rc = 0 ] || { echo "preflight=FAIL under libslice (exit $rc) although it passed without it"; return 1; }
  total=$(echo "$said" | sed -n 's/^total_bytes=//p' | tail -1)
  [ "$total" = $((1 << 30)) ] || { echo "preflight=FAIL told a total of ${total:-nothing} bytes, not the 1 GiB cap"; return 1; }
  echo "under libslice: a context, 64 MiB allocated, the 1 GiB cap told"
}
# Python under libslice, right after the C preflight under it: each step (ctypes, cuda-bindings,
# torch; frameworks/python_preflight.py) a process of its own with a 1 GiB cap, each reported, so
# that Python processes crashing under libslice (issue 22: all that made a context, SIGSEGV) are one
# named line at the top of the results, which says in which steps. Nothing is left out after it:
# the framework checks still run, for the whole picture, and each of their failures says it follows.
python_preflight() {
  local step rc why each wd out passed=() skipped=() failed=()
  each=$(((check_limit - 5) / ${#python_steps[@]}))
  wd=$((each - 5))
  [ $wd -ge 5 ] || wd=5
  for step in "${python_steps[@]}"; do
    out=$logs/$check_name.$step.out
    # --foreground: stays in the check's process group, which the check's own limit stops.
    timeout --foreground -k 3 "$each" "${under[@]}" SLICE_TENANT=preflight-python SLICE_MEMORY_LIMIT=$((1 << 30)) \
      "$python" "$fw/python_preflight.py" --step "$step" ${python_flags[@]+"${python_flags[@]}"} --timeout $wd > "$out" 2>&1
    rc=$?
    why=$(python3 tests/gpu/judge.py result-why "$out" 2> /dev/null)
    echo "-- $step: exit $rc"
    grep -v '^\s*$' "$out" | tail -n 30 | cut -c1-300 | sed 's/^/   | /'
    case $rc in
      0) passed+=("$step") ;;
      3) skipped+=("$step (${why#skip: })") ;;
      124|137) failed+=("$step: no end within $each s") ;;
      *)
        if [ $rc -gt 128 ]; then failed+=("$step: killed by SIG$(kill -l $((rc - 128)) 2> /dev/null) (exit $rc)")
        else failed+=("$step: exit $rc, ${why#fail: }"); fi ;;
    esac
  done
  local rest=''
  [ ${#passed[@]} = 0 ] || rest+="; passed: $(printf '%s, ' "${passed[@]}" | sed 's/, $//')"
  [ ${#skipped[@]} = 0 ] || rest+="; skipped: $(printf '%s, ' "${skipped[@]}" | sed 's/, $//')"
  if [ ${#failed[@]} -gt 0 ]; then
    echo "$(printf '%s; ' "${failed[@]}" | sed 's/; $//')$rest"
    return 1
  fi
  if [ ${#passed[@]} = 0 ]; then
    echo "no step ran${rest}"
    return 3
  fi
  echo "under libslice each made a context, 1 MiB and was told the 1 GiB cap${rest}"
}
runtime_cap() {  # the runtime's allocation paths at the cap; the launch entry points it fetched are libslice's
  local trace=$logs/$check_name.libslice.log launches others
  "${under[@]}" SLICE_TENANT=runtime-cap SLICE_MEMORY_LIMIT=$cap SLICE_LOG_LEVEL=trace SLICE_LOG_FILE="$trace" \
    "$bin/runtime_cap" $cap $context_charged --unsupported "$unsupported" || return 1
  # The kernel and graph launches the runtime looked up must each have come back as libslice's
  # wrapper (cuLaunchHostFunc is no kernel launch, and libslice leaves it to the driver).
  launches=$(grep -oE 'cuGetProcAddress: (cuLaunchKernel|cuLaunchKernelEx|cuLaunchCooperativeKernel|cuGraphLaunch) .*' "$trace" | sort -u)
  echo "kernel and graph launch entry points the runtime fetched:"
  echo "$launches" | head -20 | sed 's/^/  /'
  [ -n "$launches" ] || { echo "no cuGetProcAddress trace of a launch entry point in $trace"; return 1; }
  others=$(echo "$launches" | grep -v "libslice's wrapper")
  [ -z "$others" ] || { echo "launches the runtime got from the driver, not from libslice: $others"; return 1; }
  echo "every launch entry point the runtime fetched ($(echo "$launches" | wc -l) look-ups) is libslice's wrapper"
}
shares() {  # shares KERNEL_US KIND: 30/70, both tenants measured over one window that starts ahead
  local start a b
  start=$(($(date +%s%N) + share_lead_ms * 1000000))
  "${under[@]}" SLICE_TENANT="share-a-$1-$2" SLICE_COMPUTE_SHARE=30 "$bin/spin_share" busy "$1" $start $share_window "$2" > "$logs/$check_name.a.out" 2>&1 &
  a=$!
  "${under[@]}" SLICE_TENANT="share-b-$1-$2" SLICE_COMPUTE_SHARE=70 "$bin/spin_share" busy "$1" $start $share_window "$2" > "$logs/$check_name.b.out" 2>&1 &
  b=$!
  wait $a || { echo "the 30% tenant failed:"; cat "$logs/$check_name.a.out"; wait $b; return 1; }
  wait $b || { echo "the 70% tenant failed:"; cat "$logs/$check_name.b.out"; return 1; }
  python3 tests/gpu/judge.py shares "$logs/$check_name.a.out" "$logs/$check_name.b.out" "$1" "$2" "$figures_file"
}
serve() {  # serve LABEL ENV...: a server's latencies
  local label=$1
  shift
  "${under[@]}" SLICE_TENANT="server-$label" "$@" "$bin/spin_share" "${spin_server[@]}" > "$logs/$check_name.serve-$label.out" 2>&1 || return 1
  figure priority "server p99, $label" "$(value p99_us "$logs/$check_name.serve-$label.out")" us
}
priority() {  # a server's p99 alone, beside a busy tenant, and beside it with priority
  local rc alone normal high
  serve alone || return 1
  neighbour_start "$logs/$check_name.neighbour.log"
  serve normal SLICE_PRIORITY=normal && serve high SLICE_PRIORITY=high
  rc=$?
  neighbour_stop
  [ $rc = 0 ] || return 1
  alone=$(value p99_us "$logs/$check_name.serve-alone.out") normal=$(value p99_us "$logs/$check_name.serve-normal.out")
  high=$(value p99_us "$logs/$check_name.serve-high.out")
  echo "p99: alone $alone us, beside a busy tenant $normal us, with SLICE_PRIORITY=high $high us"
  [ "${high%.*}" -lt "${normal%.*}" ]
}
torch_graph() {  # the captures and replays, then libslice's figures: it saw the tenant's device time
  pyrun SLICE_TENANT=torch-graph SLICE_MEMORY_LIMIT=$((4 << 30)) SLICE_COMPUTE_SHARE=50 -- torch_checks.py --mode graph
  local rc=$?
  [ $rc = 0 ] || return $rc
  if [ -n "$slicectl" ]; then tenant_seen torch-graph || return 1
  else echo "slicectl was not carried: whether libslice saw the replays is not checked"; fi
}
transformers_shares() {  # two tenants at 30/70, alone then together (frameworks/transformers_shares.py)
  local at=$logs/$check_name a b ra rb waited=0 limit=$((check_limit - 40))
  # Started directly (not through a function), so that $! is the Python process itself.
  "${under[@]}" SLICE_TENANT=lm-a SLICE_COMPUTE_SHARE=30 SLICE_MEMORY_LIMIT=$((4 << 30)) python3 "$fw/transformers_shares.py" \
    --name a --ready-file "$at.ready-a" --plan-file "$at.plan" ${flags[@]+"${flags[@]}"} --timeout "$(watchdog_s)" \
    > "$at.a.out" 2>&1 &
  a=$!
  "${under[@]}" SLICE_TENANT=lm-b SLICE_COMPUTE_SHARE=70 SLICE_MEMORY_LIMIT=$((4 << 30)) python3 "$fw/transformers_shares.py" \
    --name b --ready-file "$at.ready-b" --plan-file "$at.plan" ${flags[@]+"${flags[@]}"} --timeout "$(watchdog_s)" \
    > "$at.b.out" 2>&1 &
  b=$!
  # Both loaded and warm (their ready files), within what the check's limit leaves for the windows.
  while [ ! -s "$at.ready-a" ] || [ ! -s "$at.ready-b" ]; do
    if ! kill -0 $a 2> /dev/null || ! kill -0 $b 2> /dev/null || [ $waited -ge $((limit * 5)) ]; then
      kill $a $b 2> /dev/null
      wait $a
      ra=$?
      wait $b
      rb=$?
      grep -hv '^\s*$' "$at.a.out" "$at.b.out" | tail -n 8
      [ $ra = 3 ] && [ $rb = 3 ] && return 3
      echo "not both ready after $((waited / 5)) s (exit $ra and $rb)"
      return 1
    fi
    sleep 0.2
    waited=$((waited + 1))
  done
  echo "both ready after $((waited / 5)) s"
  python3 "$fw/transformers_shares.py" --make-plan "$at.ready-a" "$at.ready-b" --plan-out "$at.plan" \
    --solo $lm_solo --joint $lm_joint --lead $lm_lead || { kill $a $b; return 1; }
  wait $a
  ra=$?
  wait $b
  rb=$?
  grep -h -E '^(warm-up|model|solo|joint)' "$at.a.out" "$at.b.out"
  [ $ra = 0 ] && [ $rb = 0 ] || { echo "a tenant failed (exit $ra and $rb)"; return 1; }
  python3 "$fw/transformers_shares.py" --judge "$at.a.out" "$at.b.out" --figures "$figures_file"
}
process_trace() {  # what a CUDA program sees of itself, with and without libslice (tests/shim/process_trace_test.py)
  local dir=''
  [ $dry_run = 1 ] && dir=$sim
  # A real context takes about 500 MiB: a 2 GiB cap, and a request of 4 GiB past it.
  # In this run's own coordinator, as every check under libslice (never the machine's default).
  SLICE_COORDINATOR_DIR=$coordinator python3 tests/shim/process_trace_test.py "$bin/process_trace" "$slice" "$dir" 2Gi 4096
}
clean_exits() {  # processes that end straight after launching: the watcher against the runtime's teardown
  local i f
  for i in 1 2 3 4 5; do
    f=$logs/$check_name.$i.out
    "${under[@]}" SLICE_TENANT="exit-$i" "$bin/spin_share" "${spin_exit[@]}" > "$f" 2>&1 || { cat "$f"; return 1; }
    ! grep -qiE 'crash|signal' "$f" || { cat "$f"; return 1; }
  done
  echo "5 processes exited cleanly"
}
plugin_list() {  # the device plugin against the real NVML (its gRPC libraries on its path alone)
  local libs
  libs=$(dirname "$(dirname "$plugin")")/runtime-libs
  LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$plugin" --list --slices 4 > "$logs/$check_name.list.txt" || return 1
  "$smi" --query-gpu=uuid,memory.total --format=csv,noheader,nounits > "$logs/$check_name.smi.csv" || return 1
  python3 tests/gpu/judge.py plugin-list "$logs/$check_name.list.txt" "$logs/$check_name.smi.csv" 4
}
# The most a process filled to the cap holds by nvidia-smi, sampled every 0.1 s. It may stand above
# the cap by what libslice cannot know yet: the driver's own memory beside the process's allocations
# is reconciled from NVML figures up to a second old (the 64 MiB the framework checks allow too,
# check_common.NVML_SLACK), plus 1 MiB for nvidia-smi's rounding to whole MiB.
cap_accuracy() {
  "${under[@]}" SLICE_TENANT=accuracy SLICE_MEMORY_LIMIT=$cap "$bin/driver_cap" $cap $context_charged \
    --unsupported "$unsupported" > "$logs/$check_name.driver-cap.out" 2>&1 &
  local p=$! held=0 m bound=$(((cap >> 20) + 64 + 1))
  while kill -0 $p 2> /dev/null; do
    m=$("$smi" --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2> /dev/null | awk -F', *' -v p=$p '$1 == p {print $2}')
    [[ $m =~ ^[0-9]+$ ]] && [ "$m" -gt "$held" ] && held=$m
    sleep 0.1
  done
  wait $p || { echo "driver_cap failed while sampled:"; tail -5 "$logs/$check_name.driver-cap.out"; return 1; }
  echo "the most a capped process held by nvidia-smi: $held MiB of a $((cap >> 20)) MiB cap (allowed: $bound MiB)"
  figure "cap accuracy" "held at most, of a $((cap >> 20)) MiB cap" "$held" MiB
  [ "$held" -gt 0 ] || { echo "nvidia-smi never listed the process"; return 1; }
  [ "$held" -le $bound ]
}
cpu() {  # CPU of a busy process of 1 ms kernels, without and with libslice
  "${plain[@]}" "$bin/spin_share" "${spin_cpu[@]}" > "$logs/$check_name.without.out" 2>&1 || return 1
  "${under[@]}" SLICE_TENANT=cpu "$bin/spin_share" "${spin_cpu[@]}" > "$logs/$check_name.with.out" 2>&1 || return 1
  python3 tests/gpu/judge.py cpu "$logs/$check_name.without.out" "$logs/$check_name.with.out" "${spin_cpu[3]}" "$figures_file"
}

# The run on a GPU, in order of importance. Returns early (the summary says why) where nothing more
# can run. The dry run runs all of it on stand-ins (tests/gpu/fakes).
gpu_run() {
  local m us kind
  if [ ! -x "$bin/preflight" ]; then
    record preflight-gpu FAIL 0 "the preflight program was not built (above): nothing can run"
    return
  fi
  check preflight-gpu 120 "$bin/preflight"
  if [ "$last_status" != PASS ]; then
    if [ "$last_status" = SKIP ] && [ $require_gpu = 1 ]; then
      record gpu-required FAIL 0 "no usable GPU here, and --require-gpu: $(tail -1 "$logs/preflight-gpu.log")"
    elif [ "$last_status" = SKIP ]; then
      echo "tests/gpu: no GPU here ($(tail -1 "$logs/preflight-gpu.log")): nothing to check (--require-gpu makes this a failure)"
    fi
    return
  fi
  [ -n "$smi" ] && [ $quiet = 0 ] && "$smi" -L 2>&1 | head -8
  uuid0=$(sed -n 's/^device0=[^|]*|\([^|]*\)|.*/\1/p' "$logs/preflight-gpu.log")
  check nvml-sees-pids 30 nvml_sees_pids
  context_charged=$(value context_charged "$logs/nvml-sees-pids.log")
  [ "$context_charged" = 1 ] || context_charged=0
  check nvml-reentry 30 nvml_reentry
  check nvml-cycles 60 nvml_cycles
  if [ $slice_ok = 1 ]; then
    check nvml-under-libslice 30 nvml_under_slice
    [ "$last_status" = TIMEOUT ] && slice_ok=0  # hung at a context: so would everything under libslice
  fi
  [ $slice_ok = 1 ] && { check preflight-libslice-gpu 120 preflight_slice || slice_ok=0; }
  if [ $slice_ok = 0 ]; then
    skip checks-under-libslice "libslice failed its preflight, or hung at a context (above): nothing under it was run"
    return
  fi
  # Python under libslice: when it fails, everything below still runs, and the framework checks'
  # failures are marked as following from it.
  check preflight-python 150 python_preflight
  case $last_status in PASS | SKIP) python_note='' ;; *) python_note="after preflight-python $last_status" ;; esac
  # libslice leaves no trace in the process: the same program with and without it, compared.
  check process-trace 120 process_trace
  # 1. cuGetProcAddress: the driver's own answers, then libslice's on this driver; every allocation
  #    path of the driver API at the cap, and on a card chosen by UUID.
  driver_checks
  # 2. The runtime's allocation paths at the cap, and the launch entry points it fetched.
  check runtime-cap 180 runtime_cap
  # 3. Stream capture on three threads beside a busy neighbour, with a share set.
  neighbour_start "$logs/capture-threads.neighbour.log"
  check capture-threads 120 "${under[@]}" SLICE_TENANT=capture SLICE_COMPUTE_SHARE=50 "$bin/capture_threads"
  neighbour_stop
  # 4. 30/70 shares, kernels of 0.1, 1 and 10 ms timed by %globaltimer, plainly and as graphs.
  for us in "${share_kernels[@]}"; do
    for kind in "${share_kinds[@]}"; do check "shares-${us}us-$kind" 60 shares "$us" "$kind"; done
  done
  # 5. A high-priority server beside a busy tenant; a hard limit on cooperative launches.
  check priority 120 priority
  check limit-cooperative 60 limit_cooperative
  # 6. Real frameworks in this image's own python3, each under a cap (pyrun passes --timeout).
  check_note=$python_note
  for m in caching expandable async; do
    check "torch-$m" 120 pyrun SLICE_TENANT="torch-$m" SLICE_MEMORY_LIMIT=$((4 << 30)) -- torch_checks.py --mode $m
  done
  neighbour_start "$logs/torch-graph.neighbour.log"
  check torch-graph 120 torch_graph
  neighbour_stop
  check transformers-shares 180 transformers_shares
  check jax-preallocation 90 pyrun SLICE_TENANT=jax SLICE_MEMORY_LIMIT=$((6 << 30)) -- jax_check.py
  check cupy-pool 90 pyrun SLICE_TENANT=cupy SLICE_MEMORY_LIMIT=$((4 << 30)) -- cupy_check.py
  check numba 90 pyrun SLICE_TENANT=numba SLICE_MEMORY_LIMIT=$((4 << 30)) -- numba_check.py
  check nvml-nvidia-smi 60 pyrun SLICE_TENANT=nvml SLICE_MEMORY_LIMIT=$((4 << 30)) -- nvml_check.py
  check two-processes-one-tenant 120 pyrun SLICE_TENANT=pair SLICE_MEMORY_LIMIT=$((8 << 30)) -- two_procs_one_tenant.py
  check percent-cap 90 pyrun SLICE_TENANT=percent SLICE_MEMORY_LIMIT=25% -- percent_cap.py
  # What the runtime, PyTorch and nvidia-smi (a child) show; the same inside a PID namespace.
  check runtime-view 90 pyrun SLICE_TENANT=runtime-view SLICE_MEMORY_LIMIT=$((4 << 30)) -- runtime_view.py
  check context-in-pid-namespace 90 context_in_pid_namespace
  check_note=''
  # 7. Clean exits.
  check clean-exits 60 clean_exits
  # 8. The Kubernetes device plugin against the real NVML.
  if [ -n "$plugin" ] && [ -n "$smi" ]; then check device-plugin-list 60 plugin_list
  else skip device-plugin-list "slice-device-plugin was not carried, or there is no nvidia-smi to compare with"; fi
  # 9. What slicectl says at the end.
  if [ -n "$slicectl" ]; then check status-json 30 status_json; else skip status-json "slicectl was not carried"; fi
  # --bench: per-call costs alternately with and without libslice, the system calls libslice adds per
  # call, the cap's accuracy, CPU.
  if [ $bench = 1 ]; then
    check bench-calls 180 calls
    check bench-syscalls 120 syscalls
    if [ "$context_charged" = 1 ] && [ -n "$smi" ]; then check cap-accuracy 120 cap_accuracy
    else skip cap-accuracy "nvidia-smi cannot see this machine's processes (or is missing)"; fi
    check cpu 60 cpu
  fi
}

# ---- dry run: everything that needs no GPU ----
dry_spin_args() {  # spin_share reads every form this script uses; without a GPU it says "no CUDA device"
  local now forms=() form us kind n=0 rc
  now=$(date +%s%N)
  forms=("${spin_holder[*]}" "${spin_neighbour[*]}" "${spin_server[*]}" "${spin_exit[*]}" "${spin_cpu[*]}"
    "${spin_limit[*]}")
  for us in "${share_kernels[@]}"; do
    for kind in "${share_kinds[@]}"; do forms+=("busy $us $((now + share_lead_ms * 1000000)) $share_window $kind"); done
  done
  for form in "${forms[@]}"; do
    # shellcheck disable=SC2086  # a form is its words
    "$bin/spin_share" --parse-only $form || { echo "spin_share refuses the form run.sh uses: $form"; return 1; }
    n=$((n + 1))
  done
  "$bin/spin_share" --parse-only busy 1000 0 > /dev/null 2>&1
  rc=$?
  [ $rc = 2 ] || { echo "spin_share accepts a form with an argument missing (exit $rc, not 2)"; return 1; }
  env -u LD_LIBRARY_PATH "$bin/spin_share" "${spin_exit[@]}"
  rc=$?
  [ $rc = 4 ] || [ $rc = 0 ] || { echo "spin_share ${spin_exit[*]} without a GPU: exit $rc, not 4 (no CUDA device)"; return 1; }
  echo "spin_share reads all $n forms run.sh uses; refuses a short one (2); runs up to its first CUDA call (exit $rc)"
}
dry_check_selftest() {  # the check function on functions whose outcome is known
  local saved_results=$results saved_deadline=$deadline want got wrong=() orphan t0
  t0=$(date +%s)
  st_function() {
    [ "${under[0]}" = env ] && [ ${#share_kernels[@]} = 3 ] && [ -n "$bin" ] && declare -F pyrun > /dev/null || return 1
    echo "variables, arrays and functions reach a function check"
  }
  st_skip() { echo "nothing to do here"; return 3; }
  st_timeout() { sleep 300 & echo $! > "$work/st-orphan.pid"; wait; }
  st_error() { echo "libslice[$$] error: a made-up error line"; }
  st_why() { echo 'RESULT {"check": "st", "status": "pass", "why": "the made-up reason"}'; }
  st_crash() { echo "the line before the crash"; sh -c 'kill -SEGV $$'; }
  results=$work/selftest.tsv
  : > "$results"
  quiet=1
  check selftest-function 20 st_function
  check selftest-skip 20 st_skip
  check selftest-timeout 1 st_timeout
  check selftest-error-line 20 st_error
  check selftest-program 20 true
  check selftest-why 20 st_why
  check selftest-crash 20 st_crash
  check_note="after preflight-x FAIL"
  check selftest-note 20 false
  check selftest-note-pass 20 true
  check_note=''
  deadline=$(($(date +%s) + 25))
  check selftest-out-of-time 20 true
  deadline=$saved_deadline results=$saved_results quiet=0
  for want in selftest-function:PASS selftest-skip:SKIP selftest-timeout:TIMEOUT selftest-error-line:FAIL \
    selftest-program:PASS selftest-why:PASS selftest-crash:FAIL selftest-note:FAIL selftest-note-pass:PASS \
    selftest-out-of-time:SKIP; do
    got=$(awk -F'\t' -v n="${want%%:*}" '$1 == n {print $2}' "$work/selftest.tsv")
    [ "$got" = "${want#*:}" ] || wrong+=("${want%%:*} was ${got:-not recorded}, not ${want#*:}")
  done
  grep -q $'^selftest-why\t[A-Z]*\t[0-9.]*\tpass: the made-up reason$' "$work/selftest.tsv" || wrong+=("selftest-why's detail is not the RESULT's why")
  grep -q $'^selftest-out-of-time\tSKIP\t0\tout of time' "$work/selftest.tsv" || wrong+=("selftest-out-of-time is not SKIP \"out of time\"")
  grep -q $'^selftest-crash\tFAIL\t[0-9.]*\tkilled by SIGSEGV (exit 139): the line before the crash$' "$work/selftest.tsv" ||
    wrong+=("selftest-crash's detail does not name SIGSEGV and the line before")
  grep -q $'^selftest-note\tFAIL\t[0-9.]*\t\\[after preflight-x FAIL\\] ' "$work/selftest.tsv" || wrong+=("selftest-note's detail does not start with the note")
  ! grep -q $'^selftest-note-pass\t.*\\[after' "$work/selftest.tsv" || wrong+=("a check that passed was given the note")
  orphan=$(cat "$work/st-orphan.pid" 2> /dev/null)
  sleep 0.2
  # Alive: it exists and is no zombie (a killed child of a killed shell waits a moment to be reaped).
  if [ -z "$orphan" ]; then wrong+=("the timed-out function never ran")
  elif [ -e "/proc/$orphan" ] && [ "$(awk '{print $3}' "/proc/$orphan/stat" 2> /dev/null)" != Z ]; then
    wrong+=("a process the timed-out function started outlived it")
    kill "$orphan" 2> /dev/null
  fi
  cp "$work/selftest.tsv" "$logs/check-selftest.tsv"
  if [ ${#wrong[@]} = 0 ]; then
    record check-selftest PASS $(($(date +%s) - t0)) "function checks run (variables, arrays, functions), time out as TIMEOUT with their children killed, SKIP at 3 and out of time, FAIL on a libslice error line; a RESULT's why is the detail; a crash names its signal; a note marks failures only"
  else
    record check-selftest FAIL $(($(date +%s) - t0)) "$(printf '%s; ' "${wrong[@]}")"
  fi
}
stand_ins() {  # stand_ins RESULTS LOGS: this (sub)shell's GPU path runs on the stand-ins, in short
  results=$1 figures_file=$1.figures logs=$2
  bin=$work/fakes/bin fw=$work/fakes/frameworks smi=$work/fakes/bin/nvidia-smi slicectl=$work/fakes/bin/slicectl
  plugin=$work/fakes/bin/slice-device-plugin slice=$work/fakes/libslice.so slice_ok=1 require_gpu=1 bench=1 quiet=1
  plain=(env) under=(env FAKE_UNDER=1 SLICE_COORDINATOR_DIR="$coordinator") suffix=
  share_kernels=(1000) share_lead_ms=300 neighbour_settle_s=0.2 lm_solo=0.1 lm_joint=0.2 lm_lead=0.1 bench_rounds=2
  export FAKE_REAL_FRAMEWORKS=$repo/tests/gpu/frameworks
  mkdir -p "$logs"
  : > "$results"
  : > "$figures_file"
}
dry_gpu_path() {  # the whole GPU path (gpu_run) on stand-ins, in a subshell: every check must PASS
  local fakes=$work/fakes t0 n bad
  t0=$(date +%s)
  mkdir -p "$fakes/bin" "$fakes/frameworks" "$logs/stand-ins"
  for p in preflight spin_share driver_cap procaddr_real procaddr_replay runtime_cap capture_threads bench_calls \
    syscount process_trace nvml_reentry nvml_cycles nvidia-smi slicectl slice-device-plugin; do
    ln -s "$repo/tests/gpu/fakes/fake_program.sh" "$fakes/bin/$p"
  done
  for f in "$repo"/tests/gpu/frameworks/*.py; do
    [ "$(basename "$f")" = check_common.py ] || ln -s "$repo/tests/gpu/fakes/fake_framework.py" "$fakes/frameworks/$(basename "$f")"
  done
  (
    stand_ins "$work/stand-ins.tsv" "$logs/stand-ins"
    gpu_run
  )
  cp "$work/stand-ins.tsv" "$logs/stand-ins.tsv"
  n=$(wc -l < "$work/stand-ins.tsv")
  bad=$(awk -F'\t' '$2 != "PASS" {printf "%s %s (%s); ", $1, $2, substr($4, 1, 120)}' "$work/stand-ins.tsv")
  # Python crashing under libslice, as on the first real GPU (every Python process that made a
  # context): preflight-python names the step that crashed and its signal, the run goes on to its
  # end, and each framework check's failure is marked as following from it.
  (
    stand_ins "$work/python-crash.tsv" "$logs/stand-ins-python-crash"
    export FAKE_PYTHON_CRASH=cuda-bindings
    gpu_run > /dev/null 2>&1
  )
  cp "$work/python-crash.tsv" "$logs/stand-ins-python-crash.tsv"
  mkdir -p "$work/python-crash-summary"
  cp "$work/python-crash.tsv" "$work/python-crash-summary/results.tsv"
  local said
  said=$(python3 tests/gpu/summarize.py "$work/python-crash-summary" gpu 2>&1)
  grep -q '^  and 13 later failures marked \[after preflight-python FAIL\]: torch-caching, ' <<< "$said" ||
    bad+="Python crashing: the summary does not name preflight-python as the first cause; "
  bad+=$(awk -F'\t' -v rows="$n" '
    $1 == "preflight-python" {
      seen = 1
      if ($2 != "FAIL" || index($4, "cuda-bindings: killed by SIGSEGV (exit 139); passed: ctypes, torch") != 1)
        printf "Python crashing: preflight-python %s (%s); ", $2, $4
      next
    }
    $2 == "FAIL" && index($4, "[after preflight-python FAIL] ") == 1 { marked++; next }
    $2 != "PASS" { printf "Python crashing: %s %s (%s); ", $1, $2, substr($4, 1, 120) }
    END {
      if (!seen) printf "Python crashing: no preflight-python row; "
      if (marked != 13) printf "Python crashing: %d framework checks marked as following preflight-python, not 13; ", marked
      if (NR != rows) printf "Python crashing: %d checks, not the %d of the run without; ", NR, rows
    }' "$work/python-crash.tsv")
  # And a machine without a GPU: a SKIP and nothing more, or with --require-gpu a failure.
  local required got
  for required in 0 1; do
    got=$(
      results=$work/no-gpu.tsv logs=$logs/stand-ins-no-gpu bin=$fakes/bin require_gpu=$required quiet=1
      export FAKE_NO_GPU=1
      mkdir -p "$logs"
      : > "$results"
      gpu_run > /dev/null
      cut -f1,2 "$results" | tr '\t\n' ': '
    )
    case $required:$got in
      "0:preflight-gpu:SKIP " | "1:preflight-gpu:SKIP gpu-required:FAIL ") ;;
      *) bad+="no GPU with require_gpu=$required recorded '$got'; " ;;
    esac
  done
  if [ -z "$bad" ] && [ "$n" -ge 35 ]; then  # 35: --bench, and the shares of 1 ms kernels only
    record gpu-path-on-stand-ins PASS $(($(date +%s) - t0)) "all $n checks of the GPU path (--bench) PASS on stand-in programs (functions, arguments, files, judgements); no GPU: SKIP, or FAIL with --require-gpu; Python crashing: preflight-python names the step, the rest runs, 11 framework failures marked"
  else
    record gpu-path-on-stand-ins FAIL $(($(date +%s) - t0)) "$n checks; not PASS: ${bad:-none, but fewer than 35 checks}"
    awk -F'\t' '$2 != "PASS"' "$work/stand-ins.tsv" | cut -c1-300 | sed 's/^/    /'
  fi
}

if [ $dry_run = 1 ]; then
  dry_check_selftest
  check spin-share-arguments 30 dry_spin_args
  check judgements 60 python3 tests/gpu/judge.py selftest
  # The system call counter on its probe, whose calls are known (judge.py syscount-probe).
  check syscount-selftest 30 syscount_selftest
  dry_gpu_path
  if [ -e "$sim/libcuda.so.1" ] && [ $slice_ok = 1 ]; then
    check preflight-simulated 60 "${under[@]}" SLICE_TENANT=preflight "$bin/preflight"
    uuid0=$(sed -n 's/^device0=[^|]*|\([^|]*\)|.*/\1/p' "$logs/preflight-simulated.log")
    # The Python preflight itself (not a stand-in) on the simulated GPU: with build/venv's python,
    # which has cuda-bindings; torch is not here (--allow-missing).
    [ -x "$repo/build/venv/bin/python3" ] && python=$repo/build/venv/bin/python3
    python_flags=(--allow-missing)
    check preflight-python-simulated 60 python_preflight
    python=python3 python_flags=(${flags[@]+"${flags[@]}"})
    check process-trace-simulated 60 process_trace
    check nvml-reentry-simulated 30 nvml_reentry
    check nvml-under-libslice-simulated 30 nvml_under_slice
    driver_checks
    check bench-calls-simulated 60 calls
    check bench-syscalls-simulated 60 syscalls
    if [ -n "$slicectl" ]; then
      check status-json-simulated 30 status_json
      tenant_seen_bench() { tenant_seen bench-calls; }
      check tenant-seen-simulated 30 tenant_seen_bench
    else
      skip status-json-simulated "slicectl is not built"
    fi
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
  gpu_run
fi
completed=1
exit
