#!/usr/bin/env bash
# Builds and runs the benchmarks; prints their figures (docs/benchmarks.md quotes them).
#   SLICE_BUILD_DIR=DIR   use an already built tree in DIR instead of building build/ with setup.sh
#                         (not passed on: libslice refuses SLICE_* names it does not know)
#   SHIM_BENCH_ROUNDS=N   rounds of the with/without libslice comparison (default 20)
#   BENCH_LIBSLICE=PATH   measure another libslice.so (e.g. one built from an earlier commit, to
#                         compare before and after a change in one sitting)
#   BENCH_PARTS=shim      only the with/without libslice comparison (not the simulator's,
#                         the coordinator's or the compute shares' benchmarks)
#   BENCH_PARTS=instructions  only the instructions libslice executes per call (callgrind, with
#                         tests/bench/shim_instructions.py; needs valgrind), which the default runs too
#   BENCH_PARTS=syscalls  only the system calls libslice makes per call (strace, with
#                         tests/bench/shim_syscalls.py; needs strace), which the default runs too
# Then tests/bench/compute_bench.py measures the compute shares (a few minutes); its timeline goes to
# BUILD/bench/shares.csv and, drawn by tests/bench/shares.gnuplot, BUILD/bench/shares.png
# (docs/shares.png is a copy of it).
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages of the benchmarks only (scripts/setup.sh installs the build's): gnuplot draws the
# compute shares' timeline. Installed as setup.sh does, as root; otherwise the figure is left out.
bench_packages=(gnuplot-nox)
missing=()
for p in "${bench_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
command -v gnuplot >/dev/null && missing=()  # any gnuplot will do
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "bench: installing ${missing[*]}"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; } ||
      echo "bench: could not install ${missing[*]}; the shares figure is left out"
  else
    echo "bench: missing packages (the shares figure is left out without them). Run, as root:"
    echo "  apt-get update && apt-get install -y ${missing[*]}"
  fi
fi
if [ -n "${SLICE_BUILD_DIR:-}" ]; then
  build=$(cd "$SLICE_BUILD_DIR" && pwd)
  unset SLICE_BUILD_DIR
else
  scripts/setup.sh
  build=$PWD/build
fi
rounds=${SHIM_BENCH_ROUNDS:-20}
[[ "$rounds" =~ ^[1-9][0-9]?$ ]] || { echo "bench: SHIM_BENCH_ROUNDS must be 1..99, not '$rounds'"; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/slice-bench.XXXXXX")
idle_pid=
trap 'if [ -n "$idle_pid" ]; then kill "$idle_pid" 2>/dev/null; fi; rm -rf "$work"' EXIT
export SIMGPU_STATE="$work/simgpu-state" SLICE_COORDINATOR_DIR="$work/coordinator"
parts=${BENCH_PARTS:-all}
[[ "$parts" = all || "$parts" = shim || "$parts" = instructions || "$parts" = syscalls ]] ||
  { echo "bench: BENCH_PARTS must be all, shim, instructions or syscalls, not '$parts'"; exit 2; }
if [ "$parts" = all ]; then
  "$build/bin/simgpu_bench"
  echo
  "$build/bin/coordinator_bench"
  echo
  # What a compute watcher's look at the GPU costs, by the number of tenants on it (issue 15).
  SLICE_COORDINATOR_DIR="$work/board" "$build/bin/board_bench"
  echo
fi

# ---- What libslice adds: tests/bench/shim_bench.cpp, with and without LD_PRELOAD, in one run ----
# The machine is shared and noisy, so absolute figures mean little: each mode runs alternately with
# and without libslice (the order swaps every round), and only medians and their difference count.
# Both sides see the same variables; a memory cap and a tenant make libslice take its accounting path.
# launch_share repeats the launch mode in a tenant with SLICE_COMPUTE_SHARE=50 beside a second,
# idle tenant (`shim_bench idle`, on the GPU's compute board but with no work): the compute gate's
# common path, open, with its watcher comparing shares.
slice=${BENCH_LIBSLICE:-$build/lib/libslice.so}
bench=$build/bin/shim_bench
for f in "$slice" "$bench"; do
  [ -e "$f" ] || { echo "bench: $f is missing (build the slice_shim and shim_bench targets)"; exit 1; }
done

# ---- Instructions per call: tests/bench/shim_instructions.py, under callgrind (valgrind) ----
# Host times on a shared machine move from run to run; the instructions libslice executes per call
# (with what it calls in libc and the driver, less the simulator's own work) do not.
if [ "$parts" = all ] || [ "$parts" = instructions ]; then
  if command -v valgrind >/dev/null; then
    for mode in alloc launch; do
      python3 tests/bench/shim_instructions.py --build "$build" --libslice "$slice" --mode "$mode"
    done
  else
    echo "bench: valgrind is not installed, so no instruction counts (apt-get install valgrind)"
  fi
  echo
  [ "$parts" = instructions ] && exit 0
fi

# ---- System calls per call: tests/bench/shim_syscalls.py, under strace ----
# On a real machine a system call costs some 100 ns and a wake-up far more; the common paths make
# none. launch-held: launches held back beside a busy tenant (needs simgpu-load).
if [ "$parts" = all ] || [ "$parts" = syscalls ]; then
  if command -v strace >/dev/null; then
    for mode in launch alloc launch-held; do
      python3 tests/bench/shim_syscalls.py --build "$build" --libslice "$slice" --mode "$mode"
    done
  else
    echo "bench: strace is not installed, so no system call counts (apt-get install strace)"
  fi
  echo
  [ "$parts" = syscalls ] && exit 0
fi
export SLICE_MEMORY_LIMIT=16Gi SLICE_TENANT=bench

# The figures mean something only if the program's calls reach libslice's exports.
if ! LD_DEBUG=bindings LD_PRELOAD=$slice "$bench" launch 1 >/dev/null 2>"$work/bindings" \
   || ! LD_DEBUG=bindings LD_PRELOAD=$slice "$bench" first-alloc >/dev/null 2>>"$work/bindings"; then
  grep -Ev '^ *[0-9]+:' "$work/bindings" | tail -20
  echo "bench: shim_bench failed under libslice"
  exit 1
fi
for sym in cuLaunchKernel cuMemAlloc_v2 cuMemFree_v2; do
  if ! grep -qF "to $slice [0]: normal symbol \`$sym'" "$work/bindings"; then
    echo "bench: under LD_PRELOAD, shim_bench's $sym does not bind to $slice:"
    grep "symbol \`$sym'" "$work/bindings" | head -3
    exit 1
  fi
done

# ROUNDS rounds; in each, every mode runs once without and once with libslice, in swapped order
# every other round. Each run prints `name value_ns` lines, kept as `round side name value_ns`.
# With ROW set, the lines' names become ROW.
run() {  # round side mode arg
  local round=$1 side=$2 out
  shift 2
  if [ "$side" = with ]; then
    out=$(LD_PRELOAD=$slice "$bench" "$@" 2>>"$work/stderr") || { tail -20 "$work/stderr"; echo "bench: shim_bench $* ($side libslice) failed"; exit 1; }
  else
    out=$("$bench" "$@" 2>>"$work/stderr") || { tail -20 "$work/stderr"; echo "bench: shim_bench $* ($side libslice) failed"; exit 1; }
  fi
  { grep -v '^#' <<< "$out" || true; } | sed "${ROW:+s/^[^ ]*/$ROW/;}s/^/$round $side /" >> "$work/results"
}
# The idle second tenant of launch_share, for one round: started, then stopped by stop_idle.
start_idle() {
  : > "$work/idle.out"
  SLICE_TENANT=bench-idle SLICE_MEMORY_LIMIT=1Gi SLICE_COMPUTE_SHARE=50 LD_PRELOAD=$slice \
    "$bench" idle 100 > "$work/idle.out" 2>>"$work/stderr" &
  idle_pid=$!
  for ((i = 0; i < 500; i++)); do
    grep -q ready "$work/idle.out" && return 0
    kill -0 "$idle_pid" 2>/dev/null || break
    sleep 0.01
  done
  tail -20 "$work/stderr"
  echo "bench: shim_bench idle did not start"
  exit 1
}
stop_idle() {
  kill "$idle_pid" 2>/dev/null || true
  wait "$idle_pid" 2>/dev/null || true
  idle_pid=
}
: > "$work/results"
: > "$work/stderr"
for ((r = 0; r < rounds; r++)); do
  if ((r % 2 == 0)); then order="without with"; else order="with without"; fi
  for mode in "launch 15" "alloc 40" "crowded 15" "startup 3"; do
    for side in $order; do
      # shellcheck disable=SC2086  # mode is a name and a count
      run "$r" "$side" $mode
    done
  done
  start_idle
  for side in $order; do
    SLICE_COMPUTE_SHARE=50 SLICE_TENANT=bench-share ROW=launch_share run "$r" "$side" launch 15
  done
  stop_idle
done

python3 - "$work/results" "$rounds" <<'EOF'
import statistics, sys
from collections import defaultdict

rows = [  # name, operation, target (ns, or None)
    ("launch", "cuLaunchKernel (empty kernel, batches of 1000)", 20),  # issue 15
    ("launch_share", "cuLaunchKernel, share 50, an idle 2nd tenant", 100),
    ("alloc_free", "cuMemAlloc_v2 + cuMemFree_v2, 4 KiB .. 1 MiB", 150),  # issue 15
    ("free_10k_live", "cuMemFree_v2, 10,000 live allocations", 1000),
    ("alloc_10k_live", "cuMemAlloc_v2, 10,000 live allocations", 1000),
    ("startup_first_alloc", "start-up until the first cuMemAlloc_v2 returned", None),
    ("startup_process", "whole first-alloc process (fork to reaped)", None),
]
samples = defaultdict(list)   # (side, name) -> every sample
per_round = defaultdict(list)  # (side, name, round) -> that round's samples
for line in open(sys.argv[1]):
    rnd, side, name, value = line.split()
    samples[(side, name)].append(float(value))
    per_round[(side, name, rnd)].append(float(value))

def fmt(ns, us, sign=False):
    s = "+" if sign and ns >= 0 else ""
    return f"{s}{ns / 1000:.0f} us" if us else f"{s}{ns:.0f} ns"

def quartiles(v):
    if len(v) < 4:
        return min(v), max(v)
    q = statistics.quantiles(v, n=4)
    return q[0], q[2]

print(f"libslice's cost: medians, alternating with/without LD_PRELOAD over {sys.argv[2]} rounds")
print("(SLICE_MEMORY_LIMIT=16Gi, SLICE_TENANT=bench; host time; added = with - without; spread = the")
print(" middle half of the rounds' own differences; the share row in a tenant of its own)")
print(f"  {'operation':<50} {'without':>9} {'with':>9} {'added':>9} {'ratio':>5} {'spread':>15} {'target':>10}  result")
for name, label, target in rows:
    a, b = samples.get(("without", name)), samples.get(("with", name))
    if not a or not b:
        print(f"  {label:<50} (no samples)")
        continue
    ma, mb = statistics.median(a), statistics.median(b)
    us = ma >= 100000
    added = mb - ma
    diffs = [statistics.median(per_round[("with", name, r)]) - statistics.median(per_round[("without", name, r)])
             for r in sorted({k[2] for k in per_round if k[1] == name})
             if per_round[("with", name, r)] and per_round[("without", name, r)]]
    lo, hi = quartiles(diffs)
    spread = f"{fmt(lo, us, True)}..{fmt(hi, us, True).split()[0]}"
    tgt = f"< {fmt(target, False)}" if target else "-"
    verdict = ("ok" if added < target else "over") if target else "-"
    print(f"  {label:<50} {fmt(ma, us):>9} {fmt(mb, us):>9} {fmt(added, us, True):>9} {mb / ma:>5.2f} "
          f"{spread:>15} {tgt:>10}  {verdict}")
n = {name: len(samples.get(("with", name), [])) for name, _, _ in rows}
print(f"  samples each side: {n['launch']} (and {n['launch_share']}) batches of 1000 launches, "
      f"{n['alloc_free']} of 1000 alloc+free pairs, {n['free_10k_live']} loops of 2000 calls timed alone")
print(f"  (their mean without the slowest 1%), {n['startup_process']} processes")
EOF
if [ -s "$work/stderr" ]; then
  echo "standard error of the runs (count, line):"
  sort "$work/stderr" | uniq -c | sort -rn | head -10
fi

# ---- Compute shares: tests/bench/compute_bench.py, against simgpu-stat's busy_ns (a few minutes) ----
[ "$parts" = all ] || exit 0
echo
for f in "$build/bin/simgpu-load" "$build/bin/simgpu-stat" "$build/simgpu"; do
  [ -e "$f" ] || { echo "bench: $f is missing (build the simgpu-load and simgpu-stat targets)"; exit 1; }
done

# ---- CPU per process: tests/bench/cpu_bench.py, with and without libslice (about 2 minutes) ----
# 1, 2 and 8 busy tenants and an idle joined process; every thread's CPU (user and system, from
# /proc/PID/task/*/schedstat) over 5 s of steady state, 3 rounds alternating with and without; then
# per thread for two busy tenants (--threads).
SIMGPU_STATE="$work/cpu-simgpu" SLICE_COORDINATOR_DIR="$work/cpu-coordinator" \
  python3 tests/bench/cpu_bench.py "$build" "$slice" 5 3 --threads
echo
mkdir -p "$build/bench"
csv=$build/bench/shares.csv png=$build/bench/shares.png
# A simulator of its own and a folder for its coordinators (one per section); the script passes on
# none of the SLICE_* set above.
SIMGPU_STATE="$work/compute-simgpu" SLICE_COORDINATOR_DIR="$work/compute-coordinator" \
  python3 tests/bench/compute_bench.py "$slice" "$build/simgpu" "$build/bin/simgpu-load" "$build/bin/simgpu-stat" \
  --csv "$csv"
if command -v gnuplot >/dev/null; then
  if gnuplot -e "csv='$csv'; png='$png'" tests/bench/shares.gnuplot; then
    echo "shares over time: $png (docs/shares.png, shown in docs/benchmarks.md, is a copy of it)"
  else
    echo "bench: gnuplot could not draw $png"
  fi
else
  echo "bench: no gnuplot, so no $png (the CSV is $csv)"
fi
