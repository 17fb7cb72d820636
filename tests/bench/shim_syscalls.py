#!/usr/bin/env python3
"""System calls that libslice.so adds per call, counted by strace: on a real machine each costs some
100 ns or more (and a wake-up far more), where the simulated GPU's host times hide little of it.

  tests/bench/shim_syscalls.py [--build DIR] [--libslice PATH] [--mode alloc|launch|launch-held] [--no-limit]

alloc, launch: runs `shim_bench MODE N` under `strace -f` with two values of N (start-up and the
warm-up round cancel out), with LD_PRELOAD=libslice.so, SLICE_MEMORY_LIMIT=16Gi (none with
--no-limit) and SLICE_TENANT=bench, then the same without libslice, each with a fresh SIMGPU_STATE and
SLICE_COORDINATOR_DIR, and prints per call (per cuMemAlloc_v2 + cuMemFree_v2 pair, per
cuLaunchKernel): the system calls libslice's own code made in the main thread (strace -k: the
innermost frame of libslice or the driver is libslice's); the main thread's, with libslice less
without (the driver's own included: libslice's watcher may change when the driver's locks wait);
and the other threads' (the watcher's and the simulator's, which depend on time, not on calls).

launch-held: the compute gate when it holds launches back: `shim_bench launch 3` in a tenant with
SLICE_COMPUTE_SHARE=50 beside a busy tenant of the same share (`simgpu-load`, 1 ms kernels), under
`strace -f -k`; prints the main thread's system calls made from libslice's code (the innermost
frame of libslice or the driver is libslice's), per 1000 launches, by call and function. How often
a tenant is held depends on the turns the two take, so these figures move from run to run.

Needs strace built with stack traces (-k); a few seconds per mode.
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import shim_run  # this folder's: the arguments and environment both benchmarks share

ROUNDS = (2, 6)  # shim_bench rounds of 1000 calls (plus one warm-up round each)
CALL = re.compile(r"^([a-z_0-9]+)\(")


def thread_files(out_dir, tag):
    files = [f for f in os.listdir(out_dir) if f.startswith(tag + ".")]
    files.sort(key=lambda f: int(f.rsplit(".", 1)[1]))
    return [os.path.join(out_dir, f) for f in files]


def count(path):
    calls = collections.Counter()
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = CALL.match(line)
            if m:
                calls[m.group(1)] += 1
    return calls


def made_by_libslice(path, lib_name, under=None):
    """The system calls in a `strace -k` file that libslice's own code made (the innermost frame of
    libslice or of the driver is libslice's), by (call, libslice's function); with `under`, only
    those with libslice's export of that name on the stack."""
    made = collections.Counter()

    def attribute(call, frames):
        if call is None:
            return
        if under is not None and not any(lib_name in f and f"({under}+" in f for f in frames):
            return
        for f in frames:
            if "libcuda.so" in f:
                return  # the driver's own
            if lib_name in f and "(" in f:
                fn = re.sub(r"[+(].*", "", f.split("(", 1)[1].strip())
                if "Compute::use" in fn:
                    fn = "Compute::use"  # the watcher's start, once
                if fn.startswith("slice::futex_"):
                    continue  # the helper: its caller says why
                made[(call, re.sub(r"^slice::(shim::)?", "", fn))] += 1
                return

    with open(path, encoding="utf-8", errors="replace") as f:
        call, frames = None, []
        for line in f:
            m = CALL.match(line)
            if m:
                attribute(call, frames)
                call, frames = m.group(1), []
                if call == "futex":
                    call = "futex wake" if "FUTEX_WAKE" in line else "futex wait"
            elif line.startswith(" > "):
                frames.append(line)
        attribute(call, frames)
    return made


def run(strace, bench, mode, rounds, env, work, tag, lib_name=None):
    state = os.path.join(work, tag)
    os.makedirs(state)
    env = dict(env, SIMGPU_STATE=os.path.join(state, "simgpu-state"), SLICE_COORDINATOR_DIR=os.path.join(state, "coord"))
    stacks = ["-k"] if lib_name else []
    subprocess.run([strace, "-f", "-ff", "-qq"] + stacks + ["-o", os.path.join(work, tag), bench, mode, str(rounds)],
                   env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    files = thread_files(work, tag)  # the main thread's first
    main = count(files[0])
    others = sum(sum(count(f).values()) for f in files[1:])
    own = made_by_libslice(files[0], lib_name) if lib_name else collections.Counter()
    return main, others, own


def per_call(strace, bench, mode, env, lib, work):
    figures = {}
    for side in ("with", "without"):
        side_env = dict(env, LD_PRELOAD=lib) if side == "with" else env
        lib_name = os.path.basename(lib) if side == "with" else None
        figures[side] = {r: run(strace, bench, mode, r, side_env, work, f"{side}{r}", lib_name) for r in ROUNDS}
    lo, hi = ROUNDS
    calls = (hi - lo) * 1000
    main = collections.Counter()
    for side, sign in (("with", 1), ("without", -1)):
        for name, n in figures[side][hi][0].items():
            main[name] += sign * n
        for name, n in figures[side][lo][0].items():
            main[name] -= sign * n
    others = ((figures["with"][hi][1] - figures["with"][lo][1]) - (figures["without"][hi][1] - figures["without"][lo][1]))
    what = "cuMemAlloc_v2 + cuMemFree_v2 pair" if mode == "alloc" else "cuLaunchKernel"
    own = figures["with"][hi][2]
    own.subtract(figures["with"][lo][2])
    print(f"system calls per {what} (strace, {lib}):")
    shown = {f"{c} in {fn}": v / calls for (c, fn), v in own.items() if abs(v) / calls >= 0.0005}
    print("  made by libslice's code: " + (", ".join(f"{k} {v:.3f}" for k, v in sorted(shown.items())) or "none"))
    shown = {k: v / calls for k, v in main.items() if abs(v) / calls >= 0.0005}
    print("  the main thread's, with libslice less without (the driver's own included): " +
          (", ".join(f"{k} {v:+.3f}" for k, v in sorted(shown.items())) or "none") +
          f" (total {sum(main.values()) / calls:+.3f})")
    print(f"  other threads (the watcher's and the simulator's; by time, not by call): {others / calls:+.3f}")


def held(strace, build, bench, env, lib, work):
    env = dict(env, LD_PRELOAD=lib, SIMGPU_STATE=os.path.join(work, "simgpu-state"),
               SLICE_COORDINATOR_DIR=os.path.join(work, "coord"))
    env.pop("SLICE_MEMORY_LIMIT", None)
    load = subprocess.Popen([os.path.join(build, "bin", "simgpu-load"), "--seconds", "60", "--kernel-us", "1000"],
                            env=dict(env, SLICE_TENANT="busy", SLICE_COMPUTE_SHARE="50"), stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        if load.stdout.readline().strip() != "ready":
            sys.exit("shim_syscalls: simgpu-load did not start")
        time.sleep(0.5)
        rounds = 3
        subprocess.run([strace, "-f", "-ff", "-qq", "-k", "-o", os.path.join(work, "held"), bench, "launch", str(rounds)],
                       env=dict(env, SLICE_TENANT="bench", SLICE_COMPUTE_SHARE="50"), check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    finally:
        load.kill()
        load.wait()
    launches = (rounds + 1) * 1000
    mine = made_by_libslice(thread_files(work, "held")[0], os.path.basename(lib), "cuLaunchKernel")
    print(f"system calls libslice makes while launches are held, per 1000 launches (strace -k, {lib}):")
    for (call, owner), n in sorted(mine.items(), key=lambda kv: -kv[1]):
        print(f"  {n * 1000 / launches:7.1f}  {call} in {owner}")
    print(f"  {sum(mine.values()) * 1000 / launches:7.1f}  in all")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    shim_run.add_arguments(ap)
    ap.add_argument("--mode", choices=("alloc", "launch", "launch-held"), default="alloc")
    args = ap.parse_args()
    build, lib, bench = shim_run.paths(args)
    strace = shutil.which("strace")
    if strace is None:
        sys.exit("shim_syscalls: strace is not installed (apt-get install strace)")
    needed = [lib, bench] + ([os.path.join(build, "bin", "simgpu-load")] if args.mode == "launch-held" else [])
    for f in needed:
        if not os.path.exists(f):
            sys.exit(f"shim_syscalls: {f} is missing")
    work = tempfile.mkdtemp(prefix="slice-strace.")
    try:
        env = shim_run.bench_env(build, args.no_limit)
        if args.mode == "launch-held":
            held(strace, build, bench, env, lib, work)
        else:
            per_call(strace, bench, args.mode, env, lib, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
