"""libslice in a privileged program (issue 29): a setuid-root CUDA program run by an unprivileged
user with hostile SLICE_* values. Secure execution (AT_SECURE) makes libslice ignore
SLICE_COORDINATOR_DIR, SLICE_POLICY_DIR and SLICE_LOG_FILE, and say so in one line: root creates and
writes nothing where the user chose, only in the defaults (here /dev/shm in a mount namespace of the
test's own, a tmpfs that goes with it).

  secure_execution_test.py SECURE_PROBE

On ba97fea root made the user's folder (world-writable) and appended to the root-owned log file."""
import os
import shutil
import subprocess
import sys

probe = sys.argv[1]
tmp = os.environ["SLICE_TEST_TMPDIR"]
if os.geteuid() != 0 or not shutil.which("setpriv") or not shutil.which("unshare"):
    print("SKIP: needs root, setpriv and unshare")
    sys.exit(0)
if subprocess.run(["unshare", "-m", "true"]).returncode != 0:
    print("SKIP: no mount namespace here")
    sys.exit(0)
os.chmod(tmp, 0o711)
setuid = os.path.join(tmp, "secure-probe")
shutil.copy(probe, setuid)
os.chown(setuid, 0, 0)
os.chmod(setuid, 0o4755)
evil = os.path.join(tmp, "user's")  # the user's own folder, where they would have root write
os.mkdir(evil)
os.chmod(evil, 0o777)
log = os.path.join(tmp, "root-only.log")
with open(log, "w") as f:
    f.write("root's own log\n")
os.chmod(log, 0o644)

hostile = {
    "SLICE_COORDINATOR_DIR": evil + "/coordinator",
    "SLICE_POLICY_DIR": evil + "/policy",
    "SLICE_LOG_FILE": log,
    "SLICE_LOG_LEVEL": "info",
    "SIMGPU_STATE": os.path.join(tmp, "simgpu-state"),
}
env = dict(os.environ, **hostile)
script = ('mount -t tmpfs -o mode=1777 tmpfs /dev/shm || exit 90; '
          f'setpriv --reuid=65534 --regid=65534 --clear-groups {setuid}; rc=$?; '
          'echo "tenants: $(stat -c %u /dev/shm/libslice/tenants/* 2>/dev/null | sort -u | tr "\\n" " ")"; exit $rc')
out = subprocess.run(["unshare", "-m", "sh", "-c", script], env=env, capture_output=True, text=True, timeout=60)
print(out.stdout + out.stderr)
failures = []
if out.returncode == 90:
    print("SKIP: cannot mount a tmpfs on /dev/shm in a mount namespace")
    sys.exit(0)
if out.returncode != 0 or "euid 0 cuInit 0 alloc 0" not in out.stdout:
    failures.append(f"the setuid program did not run as root with CUDA (exit {out.returncode})")
if os.listdir(evil):
    failures.append(f"root made {os.listdir(evil)} in the user's folder")
if open(log).read() != "root's own log\n":
    failures.append("root wrote into the log file the user named")
if "secure execution" not in out.stderr or "SLICE_COORDINATOR_DIR" not in out.stderr:
    failures.append("no line said the variables were ignored")
if "tenants: 0 " not in out.stdout:
    failures.append("root's tenant was not made in the default folder, as root's")
if failures:
    print("FAIL:\n" + "\n".join(failures))
    sys.exit(1)
print("ok: the hostile variables were ignored, and said so; root wrote only where root chose")
