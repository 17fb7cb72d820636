#!/usr/bin/env python3
"""Compute slices on the simulated GPU, measured against its ground truth (simgpu-stat's busy_ns
per process): busy tenants under LD_PRELOAD=libslice.so with SLICE_COMPUTE_SHARE, _LIMIT and
SLICE_PRIORITY. Usage: compute_test.py LIBSLICE SIMGPU_DIR SIMGPU_LOAD SIMGPU_STAT SLICECTL [CASE...]
(tests/run_isolated.sh gives it its own SIMGPU_STATE and SLICE_COORDINATOR_DIR). Each case prints
target and received per tenant; the tolerances are the issue's (5 points), which a scheduler that
does nothing fails (the shares would be equal)."""
import json
import os
import signal
import subprocess
import sys
import time

LIBSLICE, SIMDIR, LOAD, STAT, SLICECTL = sys.argv[1:6]
CASES = sys.argv[6:]
failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what, flush=True)
    if not ok:
        failures.append(what)


SERIAL = [0]


class Tenant:
    """A busy simgpu-load under libslice, in a tenant of its own (a new name each time: a tenant's
    first process registers its settings, so a reused name would keep an earlier case's)."""

    def __init__(self, name, kernel_us, share=None, limit=None, priority=None, seconds=30, extra=()):
        SERIAL[0] += 1
        env = dict(os.environ, LD_PRELOAD=LIBSLICE, LD_LIBRARY_PATH=SIMDIR, SLICE_TENANT=f"{name}-{SERIAL[0]}")
        for var, value in (("SLICE_COMPUTE_SHARE", share), ("SLICE_COMPUTE_LIMIT", limit), ("SLICE_PRIORITY", priority)):
            if value is not None:
                env[var] = str(value)
        self.name = name
        self.tenant = env["SLICE_TENANT"]
        self.proc = subprocess.Popen([LOAD, "--seconds", str(seconds), "--kernel-us", str(kernel_us), *map(str, extra)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                     start_new_session=True)
        line = self.proc.stdout.readline()
        assert line.strip() == "ready", f"{name} did not start: {line!r} {self.proc.stderr.read()}"

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def busy():
    out = subprocess.run([STAT, "--json"], check=True, capture_output=True, text=True).stdout
    return {p["pid"]: p["busy_ns"] for p in json.loads(out)["devices"][0]["processes"]}, time.monotonic()


def shares(tenants, seconds):
    """Each tenant's share of the device over the next `seconds`, from the simulator's account."""
    b0, t0 = busy()
    time.sleep(seconds)
    b1, t1 = busy()
    return [(b1.get(t.proc.pid, 0) - b0.get(t.proc.pid, 0)) / ((t1 - t0) * 1e9) for t in tenants]


def run_case(name, tenants_spec, targets, warmup=1.5, window=2.0, tolerance=0.05):
    tenants = []
    try:
        for spec in tenants_spec:
            tenants.append(Tenant(**spec))
        time.sleep(warmup)
        got = shares(tenants, window)
    finally:
        for t in tenants:
            t.stop()
    print(f"{name}: " + ", ".join(f"{t.name} target {x:.2f} received {g:.3f}" for t, x, g in zip(tenants, targets, got))
          + f"; device busy {sum(got):.3f}")
    for t, x, g in zip(tenants, targets, got):
        check(abs(g - x) <= tolerance, f"{name}: {t.name} received {g:.3f}, target {x:.2f} +- {tolerance:.2f}")
    return got


def case_shares_30_70():
    for k in (100, 1000, 10000):
        run_case(f"30/70, {k} us kernels", [dict(name="a", kernel_us=k, share=30), dict(name="b", kernel_us=k, share=70)],
                 [0.30, 0.70])


def case_drain_signal():
    # A tenant whose queue is held by its length while the other wants the device is told by the
    # driver when its stream drains (a host function), not by polling: some are queued, and never
    # more than one per launch (a host function that found the stream already drained must not be
    # asked for again and again).
    a, b = Tenant("a", 1000, share=30), Tenant("b", 1000, share=70)
    try:
        time.sleep(1.5)
        out = subprocess.run([STAT, "--json"], check=True, capture_output=True, text=True).stdout
        stats = {p["pid"]: p for p in json.loads(out)["devices"][0]["processes"]}
    finally:
        a.stop()
        b.stop()
    for t in (a, b):
        p = stats.get(t.proc.pid, {})
        print(f"drain signal: {t.name}: {p.get('host_functions')} host functions, {p.get('kernels')} kernels")
    signals = sum(stats.get(t.proc.pid, {}).get("host_functions", 0) for t in (a, b))
    kernels = sum(stats.get(t.proc.pid, {}).get("kernels", 0) for t in (a, b))
    check(signals > 0, f"held by their queue's length, the tenants asked the driver for the drain ({signals} times)")
    check(signals <= kernels, f"at most once per launch ({signals} host functions, {kernels} kernels)")


def case_shares_20_30_50():
    run_case("20/30/50, 1 ms kernels", [dict(name=n, kernel_us=1000, share=s) for n, s in (("a", 20), ("b", 30), ("c", 50))],
             [0.20, 0.30, 0.50])


def case_eight_equal():
    run_case("eight equal, 1 ms kernels", [dict(name=f"t{i}", kernel_us=1000) for i in range(8)], [0.125] * 8, warmup=2.0)


def case_work_conserving():
    # Alone with a 30% share: all of the device. Then a neighbour arrives: within 100 ms it has its
    # share, measured over the 200 ms after it started.
    a = Tenant("a", 1000, share=30)
    b = None
    try:
        time.sleep(1.0)
        alone = shares([a], 1.0)[0]
        check(alone >= 0.90, f"a 30% tenant alone received {alone:.3f} of the device (>= 0.90)")
        b = Tenant("b", 1000, share=70)
        time.sleep(0.1)
        first = shares([a, b], 0.3)
        print(f"work conservation: alone {alone:.3f}; in the 100-400 ms after b arrived a {first[0]:.3f} b {first[1]:.3f}")
        check(first[1] >= 0.60, f"b received {first[1]:.3f} from 100 ms after it arrived (>= 0.60: a gave the device back)")
    finally:
        for t in (a, b):
            if t:
                t.stop()


def case_neighbour_killed():
    # A neighbour that dies while it has the device never blocks the others: its heartbeats go
    # stale within 50 ms. (A stopped one, SIGSTOP, cannot be shown here: in the simulator a stopped
    # process keeps the device it was running on, which a GPU does not.)
    a, b = Tenant("a", 1000, share=50), Tenant("b", 1000, share=50)
    try:
        time.sleep(1.0)
        os.killpg(b.proc.pid, signal.SIGKILL)
        time.sleep(0.2)
        killed = shares([a], 1.0)[0]
        print(f"neighbour killed: a received {killed:.3f} in the second after")
        check(killed >= 0.85, f"beside a killed neighbour a received {killed:.3f} (>= 0.85)")
    finally:
        a.stop()
        b.stop()


def case_limit():
    got = run_case("limit 40% alone", [dict(name="a", kernel_us=1000, limit=40)], [0.40])
    # The hard limit holds on every launch path (issue 26): cooperative kernels and CUDA graphs.
    for how in ("cooperative", "graph"):
        run_case(f"limit 40% alone, {how} launches",
                 [dict(name="a", kernel_us=1000, limit=40, extra=("--launch", how))], [0.40])
    got = run_case("limit 40% beside a 20%-share tenant",
                   [dict(name="a", kernel_us=1000, share=80, limit=40), dict(name="b", kernel_us=1000, share=20)],
                   [0.40, 0.60])


def latency(extra_env=None, neighbour=None):
    SERIAL[0] += 1
    env = dict(os.environ, LD_PRELOAD=LIBSLICE, LD_LIBRARY_PATH=SIMDIR, SLICE_TENANT=f"server-{SERIAL[0]}",
               **(extra_env or {}))
    n = None
    try:
        if neighbour:
            n = Tenant("batch", 1000, **neighbour)
            time.sleep(0.5)
        out = subprocess.run([LOAD, "--requests", "300", "--kernel-us", "1000", "--gap-us", "2000"], env=env,
                             capture_output=True, text=True, timeout=60).stdout
    finally:
        if n:
            n.stop()
    words = out.split()
    return float(words[words.index("p99") + 1]), float(words[words.index("p50") + 1])


def case_priority():
    # A server of 1 ms requests with a 10% share beside a busy tenant with 90%: it asks for about a
    # third of the device, more than its share, so without priority it waits its turn.
    alone = latency({"SLICE_COMPUTE_SHARE": "10"})
    beside = latency({"SLICE_COMPUTE_SHARE": "10"}, neighbour={"share": 90})
    protected = latency({"SLICE_COMPUTE_SHARE": "10", "SLICE_PRIORITY": "high"}, neighbour={"share": 90})
    print(f"1 ms requests (10% share beside a busy 90% tenant), p99 (p50) in us: alone {alone[0]:.0f} ({alone[1]:.0f}), "
          f"beside it {beside[0]:.0f} ({beside[1]:.0f}), with SLICE_PRIORITY=high {protected[0]:.0f} ({protected[1]:.0f})")
    # The behaviour, robust on a loaded machine: priority takes most of the wait away. The latency
    # target itself (p99 within 2x alone) is a performance figure: tests/bench/compute_bench.py.
    check(protected[0] * 3 < beside[0], f"high priority p99 {protected[0]:.0f} us under a third of no priority ({beside[0]:.0f} us)")
    check(protected[1] < 2 * alone[1] + 1000, f"high priority p50 {protected[1]:.0f} us near alone ({alone[1]:.0f} us)")


def case_low_priority():
    # low only uses time no one else wants: beside a busy normal tenant it receives (almost) nothing.
    # What the normal tenant receives also depends on how busy the host keeps it (on a loaded
    # machine the device idles a few percent whoever runs), so the check is on what low takes.
    low, normal = Tenant("low", 1000, priority="low"), Tenant("normal", 1000)
    try:
        time.sleep(1.5)
        got = shares([low, normal], 2.0)
    finally:
        low.stop()
        normal.stop()
    print(f"low beside normal: low received {got[0]:.3f}, normal {got[1]:.3f}")
    check(got[0] <= 0.03, f"low received {got[0]:.3f} beside a busy normal tenant (<= 0.03)")
    check(got[1] >= 0.85, f"normal received {got[1]:.3f} (>= 0.85: the device is not left idle)")


def case_set_live():
    # slicectl set as root changes a live tenant's share; within a second the shares follow.
    if os.geteuid() != 0:
        print("skip: slicectl set needs root")
        return
    a, b = Tenant("a", 1000, share=50), Tenant("b", 1000, share=50)
    try:
        time.sleep(1.0)
        before = shares([a, b], 1.0)
        subprocess.run([SLICECTL, "set", a.tenant, "--compute", "20"], check=True, capture_output=True)
        subprocess.run([SLICECTL, "set", b.tenant, "--compute", "80"], check=True, capture_output=True)
        time.sleep(1.0)
        after = shares([a, b], 1.0)
        print(f"slicectl set: before {before[0]:.3f}/{before[1]:.3f}, after 20/80: {after[0]:.3f}/{after[1]:.3f}")
        # The split between them follows the new shares (how busy the host let the device be is
        # another matter: the other cases check that).
        split = after[0] / max(after[0] + after[1], 1e-9)
        check(abs(split - 0.2) <= 0.05, f"a second after slicectl set, a has {split:.3f} of the two's device time (0.20 +- 0.05)")
        check(after[0] + after[1] >= 0.7, f"and the device is kept busy ({after[0] + after[1]:.3f} >= 0.70)")
    finally:
        a.stop()
        b.stop()


def case_forged_neighbour():
    # Another local user, with no GPU, writes a tenant file of its own that claims to be busy, of high
    # priority, at a 100% share, and to have received nothing (issue 29: it took a busy tenant from
    # 3491 kernels to 9 in 3.5 s). Another user's tenant counts as low for these two: their shares
    # hold beside it.
    intruder = os.environ.get("COORDINATOR_INTRUDER")
    if os.geteuid() != 0 or not intruder or subprocess.run(["setpriv", "--reuid=65534", "true"]).returncode != 0:
        print("skip: needs root, setpriv and the intruder")
        return
    os.chmod(os.environ["SLICE_TEST_TMPDIR"], 0o711)  # the user reaches the coordinator folder, nothing else
    a, b = Tenant("a", 1000, share=75), Tenant("b", 1000, share=25)
    forger = None
    try:
        forger = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", intruder, "forge",
                                   os.environ["SLICE_COORDINATOR_DIR"], "forged", a.tenant],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = forger.stdout.readline().strip()
        check(line == "forging", f"the forger runs as another user ({line!r} {'' if line else forger.stderr.read()})")
        time.sleep(1.5)
        got = shares([a, b], 2.0)
    finally:
        if forger is not None:
            forger.kill()
            forger.wait()
        a.stop()
        b.stop()
    print(f"75/25 beside a forged busy high-priority tenant of another user: a {got[0]:.3f}, b {got[1]:.3f}")
    check(abs(got[0] - 0.75) <= 0.05, f"a received {got[0]:.3f} beside the forged tenant (0.75 +- 0.05)")
    check(abs(got[1] - 0.25) <= 0.05, f"b received {got[1]:.3f} beside the forged tenant (0.25 +- 0.05)")


ALL = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}
for case in CASES or ALL:
    ALL[case]()
print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
