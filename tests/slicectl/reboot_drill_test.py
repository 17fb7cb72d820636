"""The reboot drill: what an administrator set and what tenants used must outlast a reboot.

Before: an administrator's policy for tenant `team` (1 GiB, 30 % of the GPU, its processes run by
group 4242), and two tenants under libslice on the simulated GPU, `team` and `other`, holding
memory and keeping the GPU busy; `slicectl archive` runs (libslice-archive.timer's job).
The drill: every process killed (SIGKILL), the volatile coordinator folder and the simulated GPU's
state wiped, as a reboot leaves /dev/shm.
After:
- `slicectl status` shows an idle machine, and `slicectl usage --since` the hours before the drill:
  exactly what the last archive run saw (what was used after it, within the archive interval, is
  what a crash may lose);
- a process of `team` run as a member of group 4242 before `slicectl prepare` (the boot step)
  refuses to start, and says to run it: its tenant file must be root's;
- after `slicectl prepare`, it is held to the same policy from its first allocation (1.5 GiB
  refused, `cuMemGetInfo` total 1 GiB), and `slicectl usage` adds its new record to the old one.

Run by CTest through tests/run_isolated.sh (its own coordinator, policy folder, usage archive and
simulator state) with SLICECTL, LIBSLICE, SIMGPU_LIB_DIR and SIMGPU_LOAD set. Needs root (policies
are root's): exits 77, counted as skipped, otherwise.
"""
import csv
import ctypes
import io
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

SKIPPED = 77
SLICECTL = os.environ["SLICECTL"]
LIBSLICE = os.environ["LIBSLICE"]
SIMGPU_LIB_DIR = os.environ["SIMGPU_LIB_DIR"]
SIMGPU_LOAD = os.environ["SIMGPU_LOAD"]
TMP = os.environ["SLICE_TEST_TMPDIR"]
# The volatile folder in a shared, sticky one, as /dev/shm is (a non-root process may make it there).
SHM = os.path.join(TMP, "shm")
COORDINATOR = os.environ["SLICE_COORDINATOR_DIR"] = os.path.join(SHM, "libslice")
POLICIES = os.environ["SLICE_POLICY_DIR"]
ARCHIVE = os.environ["SLICECTL_ARCHIVE"]
GROUP = 4242
GiB = 1 << 30


class Failure(Exception):
    pass


def die_with_parent():
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG


def slicectl(*args, ok=True):
    r = subprocess.run([SLICECTL, *args], capture_output=True, text=True, timeout=60)
    if ok and r.returncode != 0:
        raise Failure(f"slicectl {' '.join(args)} exited {r.returncode}: {r.stderr.strip()}")
    return r


def gpu_env(tenant, as_member=False):
    env = dict(os.environ, LD_PRELOAD=LIBSLICE, LD_LIBRARY_PATH=SIMGPU_LIB_DIR, SLICE_TENANT=tenant,
               SIMGPU_MEMORY="8Gi", SIMGPU_STATE=os.path.join(TMP, "gpu", "state"))
    if as_member:
        env["SLICE_MEMORY_LIMIT"] = "4Gi"  # its own wish: the policy must win over it
    return env


def as_member(args):
    """args run as nobody, a member of the tenant's group (as the policy says its processes run)."""
    return ["setpriv", "--reuid=65534", "--regid=65534", f"--groups={GROUP}", *args]


def start_load(tenant, alloc_mib, log, member=False, show_memory=False):
    args = [SIMGPU_LOAD, "--seconds", "300", "--kernel-us", "1000", "--alloc-mib", str(alloc_mib)]
    if show_memory:
        args += ["--show-memory", "1"]
    err = open(log, "wb")
    proc = subprocess.Popen(as_member(args) if member else args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=err, env=gpu_env(tenant, member), preexec_fn=die_with_parent)
    line = proc.stdout.readline().decode().strip()
    return proc, line


def run_load(tenant, alloc_mib, log, member=False):
    """One short run: (exit status, what it printed on standard error)."""
    args = [SIMGPU_LOAD, "--seconds", "0.2", "--kernel-us", "1000", "--alloc-mib", str(alloc_mib), "--show-memory", "1"]
    r = subprocess.run(as_member(args) if member else args, capture_output=True, text=True, timeout=60,
                       env=gpu_env(tenant, member))
    with open(log, "a") as f:
        f.write(r.stderr)
    return r.returncode, r.stderr


def usage(since):
    rows = {}
    for row in csv.DictReader(io.StringIO(slicectl("usage", "--csv", "--since", since).stdout)):
        if row["gpu_uuid"]:
            rows[row["tenant"]] = (float(row["device_seconds"]), float(row["memory_byte_seconds"]))
    return rows


def stop(procs):
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def drill(procs):
    # The folders a reboot keeps and the one it wipes; a non-root member of the group must reach them.
    os.chmod(TMP, 0o755)
    for shared in (os.path.join(TMP, "gpu"), SHM):
        os.makedirs(shared, mode=0o1777)
        os.chmod(shared, 0o1777)
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 60))

    out = slicectl("set", "team", "--memory", "1Gi", "--compute", "30", "--group", str(GROUP)).stdout
    print(out.strip())
    team, line = start_load("team", 512, os.path.join(TMP, "team.log"))
    procs.append(team)
    if line != "ready":
        raise Failure(f"team did not start: {open(os.path.join(TMP, 'team.log')).read()}")
    other, line = start_load("other", 256, os.path.join(TMP, "other.log"))
    procs.append(other)
    if line != "ready":
        raise Failure(f"other did not start: {open(os.path.join(TMP, 'other.log')).read()}")
    time.sleep(3)
    print(slicectl("archive").stdout.strip())
    # What the archive holds (its totals as the run saw them), and the live figures a moment later.
    with sqlite3.connect(f"file:{ARCHIVE}?mode=ro", uri=True) as db:
        archived = {t: (d / 1e9, m) for t, d, m in
                    db.execute("SELECT tenant, last_device_ns, last_memory_byte_seconds FROM records")}
    live = usage(since)
    print(f"archived before the drill: {archived}; live a moment later: {live}")
    for tenant in ("team", "other"):
        if tenant not in archived or archived[tenant][0] <= 0 or archived[tenant][1] <= 0:
            raise Failure(f"no usage of {tenant} archived before the drill: {archived}")
        if live[tenant][0] < archived[tenant][0] - 5e-4 or live[tenant][1] < archived[tenant][1] - 0.5:  # CSV rounding
            raise Failure(f"the archive holds more than {tenant} used: {archived} vs {live}")
    time.sleep(1)  # used after the last archive run: what a crash may lose

    # The drill.
    stop(procs)
    procs.clear()
    shutil.rmtree(COORDINATOR)
    shutil.rmtree(os.path.join(TMP, "gpu"))
    os.makedirs(os.path.join(TMP, "gpu"), mode=0o1777)
    os.chmod(os.path.join(TMP, "gpu"), 0o1777)

    status = json.loads(slicectl("status", "--json").stdout)
    if not status["idle"] or any(d["tenants"] for d in status["devices"]):
        raise Failure(f"after the drill the machine is not idle: {status}")
    after = usage(since)
    print(f"after the drill: {after}")
    for tenant in ("team", "other"):
        if tenant not in after:
            raise Failure(f"slicectl usage lost {tenant} in the drill: {after}")
        # The CSV rounds device-seconds to the millisecond and byte-seconds to the unit.
        for what, a, b, rounding in zip(("device-seconds", "byte-seconds"), archived[tenant], after[tenant], (5e-4, 0.5)):
            if abs(a - b) > rounding + 1e-9 * a:
                raise Failure(f"{tenant}'s {what}: {b} after the drill, {a} archived before it")
    if not os.path.exists(os.path.join(POLICIES, "team")):
        raise Failure("the policy did not outlast the drill")

    # Before the boot step: a managed tenant's process may not make its own tenant file.
    rc, err = run_load("team", 256, os.path.join(TMP, "early.log"), member=True)
    if rc == 0 or "slicectl prepare" not in open(os.path.join(TMP, "early.log")).read() + err:
        raise Failure(f"a managed tenant started before slicectl prepare (exit {rc}): {err}")
    print("before slicectl prepare: refused, as it should be")

    print(slicectl("prepare").stdout.strip())
    rc, err = run_load("team", 1536, os.path.join(TMP, "after.log"), member=True)
    if rc == 0 or "CUDA_ERROR_OUT_OF_MEMORY" not in err:
        raise Failure(f"1.5 GiB under the 1 GiB policy was not refused at the first allocation (exit {rc}): {err}")
    if "total 1.0 GiB" not in err:
        raise Failure(f"cuMemGetInfo does not report the policy's 1 GiB: {err}")
    team, line = start_load("team", 512, os.path.join(TMP, "team-after.log"), member=True)
    procs.append(team)
    if line != "ready":
        raise Failure(f"team did not start after prepare: {open(os.path.join(TMP, 'team-after.log')).read()}")
    time.sleep(1.5)
    status = json.loads(slicectl("status", "--json").stdout)
    held = [t for d in status["devices"] for t in d["tenants"] if t["name"] == "team"]
    if not held or held[0]["memory_limit_bytes"] != GiB or not held[0]["policy"] or held[0]["compute_share"] != 30:
        raise Failure(f"after the drill team is not held to its policy: {held}")
    later = usage(since)
    print(f"with the new record: {later}")
    if not later["team"][1] > archived["team"][1] or not later["team"][0] >= archived["team"][0]:
        raise Failure(f"the new record was not added to the archived one: {later} vs {archived}")


def main():
    if os.geteuid() != 0:
        print("SKIP: the drill needs root (an administrator's policy is root's)")
        return SKIPPED
    if shutil.which("setpriv") is None:
        print("SKIP: setpriv (util-linux) is not installed")
        return SKIPPED
    procs = []
    try:
        drill(procs)
    except Failure as e:
        print(f"FAIL: {e}")
        return 1
    finally:
        stop(procs)
    print("ok: the policy and the metering history outlasted the drill")
    return 0


if __name__ == "__main__":
    sys.exit(main())
