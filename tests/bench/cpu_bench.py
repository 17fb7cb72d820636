"""The CPU that slicing costs: the CPU time of each process (all its threads, from
/proc/PID/task/*/schedstat, in ns) over a window of its steady state, with and without libslice, in
one run. Start-up is left out (it is measured by shim_bench's startup rows).

Busy tenants: N processes of simgpu-load (1 ms spin kernels, two batches in flight) on one simulated
GPU, each its own tenant (with libslice: shares 30/70 for two, equal otherwise); N = 1, 2 and 8.
Idle: a process that joined (one empty kernel, then nothing: `shim_bench idle`) beside a busy
tenant. Every case runs alternately without and with libslice, ROUNDS times; medians are printed,
as % of one core over the window, and the difference.

With --threads, once more per thread for two busy tenants (30/70) with libslice and without: each
thread's % of a core and its wake-ups a second (voluntary context switches, from
/proc/PID/task/*/status): the application's thread, the simulated driver's, libslice's watcher.

usage: cpu_bench.py BUILD_DIR LIBSLICE [SECONDS] [ROUNDS] [--threads]   (SIMGPU_STATE and
       SLICE_COORDINATOR_DIR: a scratch folder's, as scripts/bench.sh sets them)
"""
import glob
import os
import select
import statistics
import subprocess
import sys
import time

THREADS = "--threads" in sys.argv
ARGS = [a for a in sys.argv[1:] if a != "--threads"]
BUILD, LIBSLICE = ARGS[0], ARGS[1]
SECONDS = float(ARGS[2]) if len(ARGS) > 2 else 5.0
ROUNDS = int(ARGS[3]) if len(ARGS) > 3 else 3
LOAD = os.path.join(BUILD, "bin", "simgpu-load")
SHIM_BENCH = os.path.join(BUILD, "bin", "shim_bench")
SIMGPU = os.path.join(BUILD, "simgpu")
SETTLE = 0.5  # after "ready": the watcher started, the first turns taken
# Targets (issue 15): a busy tenant at most 2 points of a core above its cost without libslice, an
# idle joined process at most 0.1 %.
BUSY_TARGET, IDLE_TARGET = 2.0, 0.1


def env_for(tenant, share, with_slice):
    env = dict(os.environ, LD_LIBRARY_PATH=SIMGPU)
    for k in [k for k in env if k.startswith("SLICE_")]:
        if k != "SLICE_COORDINATOR_DIR":
            del env[k]
    if with_slice:
        env.update(LD_PRELOAD=LIBSLICE, SLICE_TENANT=tenant, SLICE_COMPUTE_SHARE=str(share))
    return env


def cpu_ns(pid):
    """CPU time of every thread of pid so far (schedstat's first field: ns on a CPU)."""
    total = 0
    for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            with open(path) as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # a thread that ended meanwhile
    return total


def start(args, env):
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, env=env)
    deadline = time.monotonic() + 30
    line = b""
    while b"ready" not in line:
        if time.monotonic() > deadline or not select.select([proc.stdout], [], [], 30)[0]:
            proc.kill()
            raise SystemExit(f"cpu_bench: {args[0]} did not get ready")
        line = proc.stdout.readline()
        if not line:
            raise SystemExit(f"cpu_bench: {args[0]} exited before it was ready ({proc.wait()})")
    return proc


def window(procs, sample):
    """sample(pid) of each of procs at the start and the end of the window [now + SETTLE, that +
    SECONDS], and the window's length in seconds."""
    time.sleep(SETTLE)
    before = [sample(p.pid) for p in procs]
    t0 = time.monotonic()
    time.sleep(SECONDS)
    after = [sample(p.pid) for p in procs]
    return before, after, time.monotonic() - t0


def measure(procs):
    """Mean % of a core of procs over the window."""
    before, after, wall = window(procs, cpu_ns)
    return statistics.mean((b - a) / 1e9 / wall * 100 for a, b in zip(before, after))


def stop(procs):
    for p in procs:
        p.kill()
        p.wait()


def busy(n, with_slice):
    shares = [30, 70] if n == 2 else [max(1, 100 // n)] * n
    run_for = str(SECONDS + SETTLE + 30)  # killed when measured
    procs = [start([LOAD, "--seconds", run_for, "--kernel-us", "1000"], env_for(f"cpu-{n}-{i}", shares[i], with_slice))
             for i in range(n)]
    try:
        return measure(procs)
    finally:
        stop(procs)


def idle(with_slice):
    run_for = str(int(SECONDS + SETTLE + 30))
    neighbour = start([LOAD, "--seconds", run_for, "--kernel-us", "1000"], env_for("cpu-neighbour", 50, with_slice))
    procs = [start([SHIM_BENCH, "idle", run_for], env_for("cpu-idle", 50, with_slice))]
    try:
        time.sleep(0.2)  # past the watcher's "recently active" looks, into its idle sleep
        return measure(procs)
    finally:
        stop(procs + [neighbour])


def per_thread(pid):
    """tid -> (ns on a CPU, voluntary context switches) of each thread of pid."""
    out = {}
    for task in glob.glob(f"/proc/{pid}/task/*"):
        try:
            with open(task + "/schedstat") as f:
                ns = int(f.read().split()[0])
            with open(task + "/status") as f:
                switches = next(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches"))
            out[int(os.path.basename(task))] = (ns, switches)
        except (OSError, ValueError, IndexError, StopIteration):
            pass  # a thread that ended meanwhile
    return out


def threads_of_two(with_slice):
    procs = [start([LOAD, "--seconds", str(SECONDS + SETTLE + 30), "--kernel-us", "1000"],
                   env_for(f"cpu-threads-{i}", share, with_slice)) for i, share in enumerate((30, 70))]
    try:
        before, after, wall = window(procs, per_thread)
    finally:
        stop(procs)
    side = "with libslice" if with_slice else "without"
    for p, share, b, a in zip(procs, (30, 70), before, after):
        # Threads in the order they were made: the application's (its pid), then the simulated
        # driver's, then libslice's watcher (made after the driver's cuInit).
        for order, tid in enumerate(sorted(a)):
            if tid not in b:
                continue
            role = "application" if tid == p.pid else f"thread {order}"
            ns, switches = a[tid][0] - b[tid][0], a[tid][1] - b[tid][1]
            print(f"  {side:<14} share {share}  {role:<12} {ns / 1e9 / wall * 100:6.2f}%  "
                  f"{switches / wall:7.0f} wake-ups/s")


def main():
    cases = [("1 busy tenant", lambda w: busy(1, w), BUSY_TARGET), ("2 busy tenants (30/70)", lambda w: busy(2, w), BUSY_TARGET),
             ("8 busy tenants", lambda w: busy(8, w), BUSY_TARGET), ("an idle joined process", idle, IDLE_TARGET)]
    results = {name: {"without": [], "with": []} for name, _, _ in cases}
    for r in range(ROUNDS):
        order = ("without", "with") if r % 2 == 0 else ("with", "without")
        for name, run, _ in cases:
            for side in order:
                results[name][side].append(run(side == "with"))
    print(f"CPU per process (all its threads, % of one core over {SECONDS:g} s of its steady state; median of "
          f"{ROUNDS} rounds, 1 ms kernels)")
    print(f"  {'case':<26} {'without':>8} {'with':>8} {'added':>8} {'target':>8}  result")
    for name, _, target in cases:
        a, b = statistics.median(results[name]["without"]), statistics.median(results[name]["with"])
        added = b - a
        print(f"  {name:<26} {a:>7.2f}% {b:>7.2f}% {added:>+7.2f}% {'<= ' + format(target, 'g'):>8}  "
              f"{'ok' if added <= target else 'over'}")
    if THREADS:
        print(f"Per thread, two busy tenants (30/70), {SECONDS:g} s (thread 1: the simulated driver's; "
              "thread 2, with libslice: its watcher)")
        for with_slice in (False, True):
            threads_of_two(with_slice)


main()
