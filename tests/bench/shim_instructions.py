#!/usr/bin/env python3
"""Instructions that libslice.so adds per call, counted by callgrind (valgrind): a figure that does not
depend on the host's load, unlike the host times of scripts/bench.sh.

  tests/bench/shim_instructions.py [--build DIR] [--libslice PATH] [--mode alloc|launch|crowded]
                                   [--no-limit] [--cache]

Runs `shim_bench MODE N` under valgrind --tool=callgrind --separate-threads=yes with two values of N
(so that start-up and the warm-up round cancel out), with LD_PRELOAD=libslice.so,
SLICE_MEMORY_LIMIT=16Gi (none with --no-limit) and SLICE_TENANT=bench, the simulated GPU on
LD_LIBRARY_PATH, and a fresh SIMGPU_STATE and SLICE_COORDINATOR_DIR for each run; then the same
without libslice. For the main
thread it prints, per call (alloc: per cuMemAlloc_v2 + cuMemFree_v2 pair; launch: per
cuLaunchKernel), the difference between the two runs divided by the calls between them:

  added      the inclusive instructions of libslice's hooks (cuMemAlloc_v2 + cuMemFree_v2, or
             cuLaunchKernel) less the inclusive instructions of the simulator's functions of the same
             names: everything libslice adds, libc (malloc, mutexes, the clock) and the driver calls
             it makes of its own (cuCtxGetCurrent) included
  in .so     the instructions executed in libslice.so itself (its functions' own cost)
  simulator  the simulator's own cost of the same calls, without libslice

and the calls libslice.so makes per call into other libraries: the driver functions it calls of its
own (their price on a real driver is what matters there) and the clock reads (clock_gettime).
crowded: a free and an allocation among 10,000 live ones (shim_bench crowded), per pair. --cache
also simulates the caches (--cache-sim=yes) and prints libslice.so's misses per call: one core's
caches, so a line another core wrote (the tenant's shared counters) is not counted as a miss.

Under valgrind the clock is read by a system call (valgrind gives the program no vDSO), which it
does not count: the instruction figures leave out the clock reads (counted apart, as calls), whose
cost the host times of scripts/bench.sh include. Needs valgrind; takes a minute or two.
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

import shim_run  # this folder's: the arguments and environment both benchmarks share

ROUNDS = (2, 6)  # shim_bench rounds of 1000 calls (plus one warm-up round each)
HOOKS = {"alloc": ("cuMemAlloc_v2", "cuMemFree_v2"), "launch": ("cuLaunchKernel",),
         "crowded": ("cuMemAlloc_v2", "cuMemFree_v2")}
CALLS_PER_ROUND = {"alloc": 1000, "launch": 1000, "crowded": 2000}  # shim_bench's loops


def parse(path):
    """Self cost per (object, function), and the inclusive cost of each call edge, from a callgrind
    output file (positions: line, one event: Ir)."""
    names = {"ob": {}, "fl": {}, "fn": {}}
    kind_of = {"ob": "ob", "cob": "ob", "fl": "fl", "fi": "fl", "fe": "fl", "cfi": "fl", "cfl": "fl",
               "fn": "fn", "cfn": "fn"}
    self_cost = collections.Counter()
    call_cost = collections.Counter()  # (caller ob, caller fn, callee ob, callee fn) -> inclusive Ir
    call_count = collections.Counter()  # the same -> calls
    events = ["Ir"]
    object_events = collections.Counter()  # (object, event) -> self cost, every event (--cache-sim)
    ob = fn = None
    cob = cfn = None
    pending_call = 0
    spec = re.compile(r"^(ob|cob|fl|fi|fe|cfi|cfl|fn|cfn)=\((\d+)\)(?: (.*))?$")
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("events:"):
                events = line.split()[1:]
                continue
            m = spec.match(line)
            if m:
                key, ident, name = m.groups()
                table = names[kind_of[key]]
                if name is not None:
                    table[ident] = name
                value = table.get(ident, ident)
                if key == "ob":
                    ob = value
                elif key == "fn":
                    fn = value
                elif key == "cob":
                    cob = value
                elif key == "cfn":
                    cfn = value
                continue
            if line.startswith("calls="):
                pending_call = int(line[len("calls="):].split()[0])
                continue
            if not line or not (line[0].isdigit() or line[0] in "+-*"):
                continue
            parts = line.split()
            if len(parts) < 2:
                continue
            cost = int(parts[1])
            if pending_call:
                call_cost[(ob, fn, cob if cob is not None else ob, cfn)] += cost
                call_count[(ob, fn, cob if cob is not None else ob, cfn)] += pending_call
                pending_call = 0
                cob = cfn = None
            else:
                self_cost[(ob, fn)] += cost
                for name, value in zip(events, parts[1:]):
                    object_events[(ob, name)] += int(value)
    return self_cost, call_cost, call_count, object_events


def calls_out(call_count, from_match, to_match):
    """Calls from objects matching `from_match` into objects matching `to_match`, by callee name."""
    out = collections.Counter()
    for (o, _, co, cf), n in call_count.items():
        if from_match(o) and to_match(co):
            out[cf.split("@")[0]] += n
    return out


def inclusive(self_cost, call_cost, ob_match, fn):
    total = sum(c for (o, f), c in self_cost.items() if f == fn and ob_match(o))
    total += sum(c for (o, f, _, _), c in call_cost.items() if f == fn and ob_match(o))
    return total


def run(valgrind, bench, mode, rounds, env, out_dir, tag, cache=False):
    # A fresh simulator state and coordinator folder for each run, so that every run's start-up
    # (which creates them) costs the same and cancels out.
    state = os.path.join(out_dir, tag)
    os.makedirs(state)
    env = dict(env, SIMGPU_STATE=os.path.join(state, "simgpu-state"), SLICE_COORDINATOR_DIR=os.path.join(state, "coord"))
    out = os.path.join(out_dir, f"{tag}.%p")
    subprocess.run([valgrind, "--tool=callgrind", "--separate-threads=yes", f"--callgrind-out-file={out}"] +
                   (["--cache-sim=yes"] if cache else []) + [bench, mode, str(rounds)], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    main = [f for f in os.listdir(out_dir) if f.startswith(tag + ".") and f.endswith("-01")]
    if len(main) != 1:
        sys.exit(f"shim_instructions: no callgrind output of the main thread for {tag}")
    return parse(os.path.join(out_dir, main[0]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    shim_run.add_arguments(ap)
    ap.add_argument("--mode", choices=sorted(HOOKS), default="alloc")
    ap.add_argument("--cache", action="store_true",
                    help="also simulate the caches (--cache-sim=yes): libslice.so's misses per call")
    args = ap.parse_args()
    build, lib, bench = shim_run.paths(args)
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        sys.exit("shim_instructions: valgrind is not installed (apt-get install valgrind)")
    for f in (lib, bench):
        if not os.path.exists(f):
            sys.exit(f"shim_instructions: {f} is missing")
    lib_name = os.path.basename(lib)
    is_slice = lambda o: o is not None and (o == lib or os.path.basename(o) == lib_name)
    is_sim = lambda o: o is not None and os.path.basename(o).startswith("libcuda.so")
    is_bench = lambda o: o is not None and os.path.basename(o) == os.path.basename(bench)
    hooks = HOOKS[args.mode]
    work = tempfile.mkdtemp(prefix="slice-callgrind.")
    try:
        env = shim_run.bench_env(build, args.no_limit)
        figures = {}
        out_calls = {}
        misses = {}
        for rounds in ROUNDS:
            with_env = dict(env, LD_PRELOAD=lib)
            s, c, n, ev = run(valgrind, bench, args.mode, rounds, with_env, work, f"with{rounds}", args.cache)
            misses[rounds] = collections.Counter()
            for (o, name), v in ev.items():
                if is_slice(o):
                    misses[rounds][name] += v
            hooks_incl = sum(inclusive(s, c, is_slice, h) for h in hooks)
            sim_incl = sum(inclusive(s, c, is_sim, h) for h in hooks)
            in_so = sum(v for (o, _), v in s.items() if is_slice(o))
            # What libslice.so calls outside itself, less the calls of the program it passes on.
            out_calls[rounds] = calls_out(n, is_slice, lambda o: o is not None and not is_slice(o))
            out_calls[rounds].subtract(calls_out(n, is_bench, is_slice))
            s, c, _, _ = run(valgrind, bench, args.mode, rounds, env, work, f"without{rounds}")
            alone = sum(inclusive(s, c, is_sim, h) for h in hooks)
            figures[rounds] = (hooks_incl - sim_incl, in_so, alone)
        lo, hi = ROUNDS
        calls = (hi - lo) * CALLS_PER_ROUND[args.mode]
        per = [(figures[hi][i] - figures[lo][i]) / calls for i in range(3)]
        made = {f: (out_calls[hi][f] - out_calls[lo][f]) / calls for f in out_calls[hi]}
        made = {f: v for f, v in made.items() if abs(v) >= 0.0005}
        what = "cuLaunchKernel" if args.mode == "launch" else "cuMemAlloc_v2 + cuMemFree_v2 pair"
        if args.mode == "crowded":
            what += " among 10,000 live allocations"
        print(f"instructions per {what} (callgrind, main thread, {lib}):")
        print(f"  added by libslice (hooks inclusive, less the simulator's own): {per[0]:.0f}")
        print(f"  of which in libslice.so itself:                               {per[1]:.0f}")
        print(f"  the simulator's own, without libslice:                        {per[2]:.0f}")
        driver = {f: v for f, v in made.items() if f.startswith("cu")}
        print("  driver calls libslice makes of its own: " +
              (", ".join(f"{f} {v:.3f}" for f, v in sorted(driver.items())) or "none"))
        print(f"  clock reads (clock_gettime): {made.get('clock_gettime', 0):.3f}")
        other = {f: v for f, v in made.items() if not f.startswith("cu") and f != "clock_gettime"}
        print("  other calls out of libslice.so: " +
              (", ".join(f"{f} {v:.3f}" for f, v in sorted(other.items())) or "none"))
        if args.cache:
            m = {k: (misses[hi][k] - misses[lo][k]) / calls for k in ("D1mr", "D1mw", "DLmr", "DLmw", "I1mr", "ILmr")}
            print(f"  simulated cache misses in libslice.so: data L1 {m['D1mr']:.2f} read, {m['D1mw']:.2f} write; "
                  f"last level {m['DLmr'] + m['DLmw']:.2f}; instructions L1 {m['I1mr']:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
