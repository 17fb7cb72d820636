"""Children never escape their slice's budget (issue 26), on the simulated GPU. A program under
libslice with a 2 GiB cap and no SLICE_TENANT holds 512 MiB; a process it started, however it was
started, asks for 1800 MiB: refused (the two share one budget), and it is in the same tenant.

  lineage_test.py LINEAGE_PROBE LIBSLICE DRIVER_DIR PYTHON SLICE_RUN SLICECTL

Ways a child is started: with a copy of the environment taken at main (Go's os/exec); from Python
with subprocess(env=dict(os.environ)); before the parent's first CUDA call; a grandchild through a
shell; one whose parent (a shell) exited before it started CUDA; and under slice-run without
--tenant, which names the tenant before the program runs; in a PID namespace without a /proc of its
own; through a parent that is not dumpable, as an unprivileged user. And two unrelated programs
started by one process that is no member must not share. This script is no member: it runs the trees. Last, a
member killed leaves its marker, and `slicectl gc` removes it."""
import os
import shutil
import subprocess
import sys
import textwrap

probe, libslice, driver_dir, python, slice_run, slicectl = sys.argv[1:7]
failures = []
env = dict(os.environ)
env.update(LD_PRELOAD=libslice, LD_LIBRARY_PATH=driver_dir, SLICE_MEMORY_LIMIT="2Gi", SIMGPU_MEMORY="8Gi")
env.pop("SLICE_TENANT", None)


def run(args, label):
    out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    lines = out.stdout.splitlines()
    print(f"{label}: exit {out.returncode}: " + " | ".join(lines))
    if out.returncode != 0:
        failures.append(f"{label}: exit {out.returncode}: {out.stderr.strip()}")
    return lines


def tenant(line):
    return line.split()[1] if line.startswith("tenant ") else None


def same_budget(label, lines):
    """The holder's tenant first, then the child's refused request, in the same tenant."""
    holder = [l for l in lines if " holds " in l]
    child = [l for l in lines if " alloc " in l]
    if not holder or not child:
        failures.append(f"{label}: lines missing: {lines}")
        return
    if not child[0].endswith("refused"):
        failures.append(f"{label}: the child's 1800 MiB beside its parent's 512 MiB under a 2 GiB cap: {child[0]}")
    if tenant(holder[0]) != tenant(child[0]):
        failures.append(f"{label}: the child is in tenant {tenant(child[0])}, its parent in {tenant(holder[0])}")


child = [probe, "alloc", "1800"]
for how in ("snapshot", "before-cuda", "orphan"):
    same_budget(how, run([probe, "hold", "512", how, "--", *child], how))
# A grandchild, through a shell that stays.
same_budget("grandchild", run([probe, "hold", "512", "snapshot", "--", "/bin/sh", "-c", " ".join(child)], "grandchild"))
# A Python program under libslice that starts its child with a copy of its environment.
member = textwrap.dedent(f"""
    import ctypes, os, subprocess, sys
    cu = ctypes.CDLL("libcuda.so.1")
    dev, ctx, p = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    assert cu.cuInit(0) == 0 and cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cu.cuCtxSetCurrent(ctx) == 0
    assert cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(512 << 20)) == 0
    info = (ctypes.c_uint8 * 112)()
    ctypes.c_uint32.from_buffer(info).value = 112
    lib = ctypes.CDLL(None)
    lib.slice_get_info(0, info)
    print("tenant " + bytes(info[8:72]).split(b"\\0")[0].decode() + " holds 512", flush=True)
    sys.exit(subprocess.run({child!r}, env=dict(os.environ)).returncode)
""")
same_budget("python env=dict(os.environ)", run([python, "-c", member], "python env=dict(os.environ)"))
# slice-run without --tenant: the tenant is named before the program runs, and the child's copy of
# the environment carries it.
under_run = run([slice_run, "--memory", "2Gi", "--", probe, "hold", "512", "snapshot", "--", *child], "slice-run")
same_budget("slice-run", under_run)
# Two unrelated programs, started by this script (no member): tenants of their own.
a = run([probe, "alloc", "1500"], "unrelated a")
b = run([probe, "alloc", "1500"], "unrelated b")
if not (a and b and a[0].endswith("ok") and b[0].endswith("ok") and tenant(a[0]) != tenant(b[0])):
    failures.append(f"two unrelated programs shared a budget: {a} {b}")

# A PID namespace made without a /proc of its own (`unshare --pid --fork`): the member in it is
# named as that /proc numbers it. Named by its PID in its own namespace (1), it was the host's init,
# whose descendants (every process) then all joined its tenant.
members = os.path.join(os.environ["SLICE_COORDINATOR_DIR"], "members")
if shutil.which("unshare") and subprocess.run(["unshare", "--pid", "--fork", "true"]).returncode == 0:
    inside = subprocess.Popen(["unshare", "--pid", "--fork", probe, "hold", "512", "snapshot", "--", "/bin/sh", "-c",
                               " ".join(child) + "; sleep 2"], env=env, stdout=subprocess.PIPE, text=True)
    lines = [inside.stdout.readline().strip(), inside.stdout.readline().strip()]
    print(f"pid namespace: {' | '.join(lines)}")
    same_budget("pid namespace without its /proc", lines)
    host_init = [m for m in os.listdir(members) if m.startswith(f"{os.stat('/proc/self').st_dev}.1.")]
    if host_init:
        failures.append(f"a member in a PID namespace was marked as the host's init: {host_init}")
    outside = run([probe, "alloc", "1500"], "unrelated, beside the namespace")
    if not (outside and outside[0].endswith("ok") and lines and tenant(outside[0]) != tenant(lines[0])):
        failures.append(f"an unrelated program joined the tenant of a member in a PID namespace: {outside} {lines}")
    inside.wait(timeout=30)
else:
    print("pid namespace: SKIP (unshare --pid is not allowed here)")

# An ancestor that is not dumpable, run by an unprivileged user: its /proc/<pid>/ns is closed to
# its own user's processes, and must not cut the line (a child that stopped there started a tenant
# of its own). The user gets a coordinator and a simulated machine of their own.
if shutil.which("setpriv") and os.geteuid() == 0:
    tmp = os.environ["SLICE_TEST_TMPDIR"]
    os.chmod(tmp, 0o711)
    own = os.path.join(tmp, "nobody")
    os.mkdir(own)
    os.chmod(own, 0o1777)
    as_nobody = dict(env, SLICE_COORDINATOR_DIR=own + "/coordinator", SIMGPU_STATE=own + "/simgpu-state",
                     SIMGPU_VIOLATIONS=own + "/violations", SLICE_TEST_TMPDIR=own)
    saved, env = env, as_nobody
    same_budget("non-dumpable parent, another user",
                run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", probe, "hold", "512", "nondumpable",
                     "--", *child], "non-dumpable parent, another user"))
    env = saved
    if os.path.exists(own + "/violations") and os.path.getsize(own + "/violations"):
        failures.append("the simulated driver saw illegal calls: " + open(own + "/violations").read())
else:
    print("non-dumpable parent: SKIP (needs root and setpriv)")

# A member killed (no exit handler) leaves its marker; slicectl gc removes markers of gone processes.
holder = subprocess.Popen([probe, "hold", "64", "snapshot", "--", "/bin/sleep", "30"], env=env,
                          stdout=subprocess.PIPE, text=True)
holder.stdout.readline()  # "tenant ... holds 64": a member now
marked = [m for m in os.listdir(members) if f".{holder.pid}." in m]
holder.kill()
holder.wait()
gc = subprocess.run([slicectl, "gc"], capture_output=True, text=True, timeout=30)
print(f"slicectl gc: {gc.stdout.strip()}")
if len(marked) != 1:
    failures.append(f"the member {holder.pid} had {marked} as markers, not one")
elif os.path.lexists(os.path.join(members, marked[0])) or "1 marker of gone processes removed" not in gc.stdout:
    failures.append(f"slicectl gc left the killed member's marker: {gc.stdout} {gc.stderr}")

if failures:
    print("FAIL:\n" + "\n".join(failures))
    sys.exit(1)
print("ok: every child in its parent's tenant and refused past the shared cap; unrelated programs apart")
