"""What the podman tests share: a podman with a private store in the test's temporary folder, root
file systems made from host files, the simulated GPU seen by host and containers alike, and the
check that nothing is left behind.

Podman here: Debian's (4.3) with runc, as root. Every call names a store, a run root, a temporary
folder, an events log, a network configuration folder and a containers.conf of the test's own, the
vfs storage driver (no mount outlives a command), no network, and a cgroup parent of its own that
the test removes, so that the host's podman state is never read or written. Containers run with
--rm; whatever is still there at the end (a test that failed half-way) is removed by cleanup().
"""
import glob
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid

SKIP = 77
RUNC_ROOT = "/run/runc"
SHM_LOCK = "/dev/shm/libpod_lock"  # podman's default lock file, which these tests must not make
GIB = 1 << 30
MIB = 1 << 20


def skip(reason):
    print(f"SKIP: {reason}")
    sys.exit(SKIP)


def require_podman():
    """Skips (77) unless podman and runc are installed and this is root."""
    if os.geteuid() != 0:
        skip("podman runs these containers as root (runc, cgroupfs): run the test as root")
    if shutil.which("podman") is None:
        skip("podman is not installed (Debian: apt-get install podman runc; scripts/setup.sh does)")
    if shutil.which("runc", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") is None:
        skip("runc is not installed (Debian: apt-get install runc; scripts/setup.sh does)")


def test_dir():
    base = os.environ.get("SLICE_TEST_TMPDIR")
    if not base:
        print("FAIL: run through tests/run_isolated.sh (SLICE_TEST_TMPDIR is not set)")
        sys.exit(1)
    return base


class Checks:
    """Named checks: each prints ok or FAIL, the test fails at the end if any failed."""

    def __init__(self):
        self.failed = []

    def check(self, ok, what, detail=""):
        print(("ok: " if ok else "FAIL: ") + what + ("" if ok or not detail else f"\n  {detail}"), flush=True)
        if not ok:
            self.failed.append(what)
        return ok

    def finish(self):
        if self.failed:
            print(f"{len(self.failed)} check(s) failed: " + "; ".join(self.failed))
            return 1
        print("all checks passed")
        return 0


def terminate_on_signals():
    """SIGTERM (ctest's timeout) and SIGINT run the test's finally blocks."""
    def handler(signum, _frame):
        raise SystemExit(f"stopped by signal {signum}")
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


# ---- root file systems made from host files ----

def inside(root, path, depth=0):
    """Where `path` of the container lies under `root`, following the root file system's own
    symbolic links as the container will (an absolute link stays inside root)."""
    if depth > 40:
        raise RuntimeError(f"too many symbolic links under {root} for {path}")
    parts = [p for p in path.split("/") if p and p != "."]
    current = ""
    for i, part in enumerate(parts):
        if part == "..":
            current = current.rsplit("/", 1)[0]
            continue
        following = current + "/" + part
        if os.path.islink(root + following):
            target = os.readlink(root + following)
            rest = "/".join(parts[i + 1:])
            start = "" if target.startswith("/") else current
            return inside(root, start + "/" + target + ("/" + rest if rest else ""), depth + 1)
        current = following
    return root + (current or "/")


def copy_from_host(root, path, depth=0):
    """Copies the host's `path` to the same place under `root`, with every symbolic link along the
    way (Debian's /lib -> usr/lib, libstdc++.so.6 -> libstdc++.so.6.0.30) made the same there."""
    if depth > 40:
        raise RuntimeError(f"too many symbolic links in {path}")
    parts = [p for p in path.split("/") if p and p != "."]
    current = ""
    for i, part in enumerate(parts):
        following = current + "/" + part
        if os.path.islink(following):
            target = os.readlink(following)
            link = inside(root, current) + "/" + part
            if not os.path.lexists(link):
                os.makedirs(os.path.dirname(link), exist_ok=True)
                os.symlink(target, link)
            rest = "/".join(parts[i + 1:])
            start = "" if target.startswith("/") else current
            return copy_from_host(root, os.path.normpath(start + "/" + target + ("/" + rest if rest else "")),
                                  depth + 1)
        current = following
    dest = inside(root, current)
    if os.path.isdir(current):
        os.makedirs(dest, exist_ok=True)
    elif not os.path.exists(dest):
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copy2(current, dest)
    return current


def place(root, host_file, container_path, mode=None):
    """Copies `host_file` (its content, links followed) to `container_path` under `root`."""
    dest = inside(root, container_path)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    shutil.copyfile(host_file, dest)
    shutil.copymode(host_file, dest)
    if mode is not None:
        os.chmod(dest, mode)


def shared_libraries(binary, env=None, skip_dirs=()):
    """The shared libraries `binary` loads, as ldd finds them (absolute paths); an error names a
    library ldd cannot find."""
    out = subprocess.run(["ldd", binary], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"ldd {binary}: {out.stdout}{out.stderr}")
    found = []
    for line in out.stdout.splitlines():
        if "not found" in line:
            raise RuntimeError(f"ldd {binary}: {line.strip()}")
        words = line.split()
        path = words[2] if "=>" in words and len(words) > 2 else words[0]
        if path.startswith("/") and not any(path.startswith(d.rstrip("/") + "/") for d in skip_dirs):
            found.append(path)
    return found


def host_library_dir():
    """The folder of the host's libc, as the loader finds it (/usr/lib/x86_64-linux-gnu on Debian):
    where a container of this host's distribution keeps its libraries, and where the NVIDIA
    container toolkit puts the driver's."""
    for path in shared_libraries(sys.executable):
        if os.path.basename(path).startswith("libc.so"):
            return os.path.dirname(os.path.realpath(path))
    raise RuntimeError("libc not found among python's libraries")


def add_program(root, host_binary, container_path, env=None, skip_dirs=()):
    """`host_binary` at `container_path` in the root file system, with the libraries it needs."""
    place(root, host_binary, container_path)
    for library in shared_libraries(host_binary, env, skip_dirs):
        copy_from_host(root, library)


def add_simulated_driver(root, simgpu_lib_dir):
    """The simulated driver's libcuda.so.1 and libnvidia-ml.so.1 in the container's library folder,
    where the NVIDIA container toolkit would put the real driver's, with what they need."""
    libdir = host_library_dir()
    for name in ("libcuda.so.1", "libnvidia-ml.so.1"):
        source = os.path.join(simgpu_lib_dir, name)
        place(root, source, os.path.join(libdir, name))
        for library in shared_libraries(source, skip_dirs=(simgpu_lib_dir,)):
            copy_from_host(root, library)


# ---- the simulated GPU, shared by host and containers ----

class SimulatedGpu:
    """Its state file in a folder of its own, which containers mount at /simgpu: host and
    containers see one GPU. What the simulator saw break its rules inside a container is added to
    the host's report (SIMGPU_VIOLATIONS), which tests/run_isolated.sh reads."""

    def __init__(self, base, lib_dir, devices=2, memory="8Gi"):
        self.dir = os.path.join(base, "simgpu")
        os.makedirs(self.dir, exist_ok=True)
        self.lib_dir = lib_dir
        self.devices, self.memory = devices, memory
        self.state = os.path.join(self.dir, "state")
        self.container_violations = os.path.join(self.dir, "violations")
        self.env = dict(os.environ, LD_LIBRARY_PATH=lib_dir, SIMGPU_STATE=self.state,
                        SIMGPU_DEVICES=str(devices), SIMGPU_MEMORY=memory)

    def podman_args(self):
        # The same machine settings as the host's processes: a process that finds the state file
        # unused and made with other settings builds the machine it is told to.
        return ["-v", f"{self.dir}:/simgpu", "--env", "SIMGPU_STATE=/simgpu/state",
                "--env", "SIMGPU_VIOLATIONS=/simgpu/violations", "--env", f"SIMGPU_DEVICES={self.devices}",
                "--env", f"SIMGPU_MEMORY={self.memory}"]

    def report_container_violations(self):
        if os.path.exists(self.container_violations) and os.path.getsize(self.container_violations):
            host = os.environ.get("SIMGPU_VIOLATIONS")
            with open(self.container_violations) as f:
                text = f.read()
            print("the simulated driver saw calls the real driver would punish, in a container:\n" + text)
            if host:
                with open(host, "a") as f:
                    f.write(text)


def uuid_of_gpu(index):
    """The simulated GPU's UUID for a device index (tools/simgpu/sim_identity.cpp)."""
    return f"GPU-516d696d-6770-4075-8000-{index:012x}"


# ---- podman with a private store ----

class Podman:
    def __init__(self, base):
        self.base = os.path.join(base, "podman")
        for sub in ("root", "run", "tmp", "networks", "buildtmp"):
            os.makedirs(os.path.join(self.base, sub), exist_ok=True)
        # A containers.conf of its own: none of the host's settings (a systemd cgroup manager, a
        # journald events log, another network backend) apply, and nothing of the host's is read.
        conf = os.path.join(self.base, "containers.conf")
        with open(conf, "w") as f:
            # File locks, in --tmpdir: the default (shm) leaves /dev/shm/libpod_lock behind.
            f.write('[engine]\nevents_logger = "file"\ncgroup_manager = "cgroupfs"\nruntime = "runc"\n'
                    'lock_type = "file"\n'
                    f'[network]\nnetwork_config_dir = "{self.base}/networks"\n')
        storage = os.path.join(self.base, "storage.conf")
        with open(storage, "w") as f:
            f.write(f'[storage]\ndriver = "vfs"\ngraphroot = "{self.base}/root"\nrunroot = "{self.base}/run"\n')
        self.env = dict(os.environ, CONTAINERS_CONF=conf, CONTAINERS_STORAGE_CONF=storage,
                        TMPDIR=os.path.join(self.base, "buildtmp"))
        self.globals = ["podman", "--root", f"{self.base}/root", "--runroot", f"{self.base}/run",
                        "--storage-driver", "vfs", "--tmpdir", f"{self.base}/tmp", "--events-backend", "file",
                        "--network-config-dir", f"{self.base}/networks", "--runtime", "runc",
                        "--cgroup-manager", "cgroupfs"]
        # A cgroup parent of this test's own, removed by cleanup(): podman leaves conmon's cgroup.
        self.cgroup = "libslice-test-" + uuid.uuid4().hex[:12]
        self.run_options = ["--rm", "--network", "none", "--cgroup-parent", "/" + self.cgroup,
                            "--ulimit", "nofile=1024:20000", "--ulimit", "nproc=1024:1024"]
        # runc keeps each container's state in /run/runc/ID (removed with the container); on a host
        # where runc never ran, it makes /run/runc itself, which cleanup() removes again. (runc's
        # --root elsewhere would not do: podman deletes the container without it.)
        self.made_runc_root = not os.path.exists(RUNC_ROOT)
        self.had_shm_lock = os.path.exists(SHM_LOCK)

    def command(self, args):
        return self.globals + list(args)

    def run(self, args, timeout=60, **kwargs):
        return subprocess.run(self.command(args), env=self.env, capture_output=True, text=True, timeout=timeout,
                              **kwargs)

    def run_container(self, options, image_or_rootfs, argv, timeout=60):
        """podman run --rm ...: `image_or_rootfs` an image name, or ("rootfs", DIR)."""
        return self.run(self.container_args(options, image_or_rootfs, argv), timeout=timeout)

    def container_args(self, options, image_or_rootfs, argv):
        target = (["--rootfs", image_or_rootfs[1]] if isinstance(image_or_rootfs, tuple) else [image_or_rootfs])
        return ["run"] + self.run_options + list(options) + target + list(argv)

    def build(self, args, timeout=120):
        """podman build: containers/image keeps a blob info cache that root's processes always write
        to /var/lib/containers/cache, whatever the store. The build runs in a mount namespace of
        its own with a tmpfs there, so the host's folder is neither made nor changed."""
        cover = "/var/lib/containers" if os.path.isdir("/var/lib/containers") else "/var/lib"
        wrapper = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                   f'mount -t tmpfs -o size=64m,mode=0700 libslice-test {cover} && exec "$@"', "sh"]
        return subprocess.run(wrapper + self.command(["build"] + list(args)), env=self.env, capture_output=True,
                              text=True, timeout=timeout)

    def cgroup_dirs(self):
        found = glob.glob(f"/sys/fs/cgroup/*/{self.cgroup}") + glob.glob(f"/sys/fs/cgroup/{self.cgroup}")
        return sorted(found)

    def cleanup(self):
        """Removes every container and image of the private store, then the test's cgroups."""
        try:
            listed = self.run(["ps", "-aq"], timeout=30).stdout.split()
            if listed:
                self.run(["rm", "-f", "-t", "0"] + listed, timeout=60)
            images = self.run(["images", "-q"], timeout=30).stdout.split()
            if images:
                self.run(["rmi", "-f"] + images, timeout=60)
        except (OSError, subprocess.SubprocessError) as e:
            print(f"cleanup: podman: {e}")
        for _ in range(50):
            left = []
            for top in self.cgroup_dirs():
                for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda w: -w[0].count("/")):
                    try:
                        os.rmdir(dirpath)
                    except OSError:
                        left.append(dirpath)
            if not left:
                break
            time.sleep(0.1)
        else:
            print("cleanup: cgroups still in use: " + " ".join(left))
        if self.made_runc_root:
            try:
                os.rmdir(RUNC_ROOT)
            except OSError:
                pass


def remove_stale_cgroups():
    """Empty cgroups that an earlier run of these tests left when it was killed."""
    for top in glob.glob("/sys/fs/cgroup/*/libslice-test-*") + glob.glob("/sys/fs/cgroup/libslice-test-*"):
        for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda w: -w[0].count("/")):
            try:
                os.rmdir(dirpath)
            except OSError:
                pass


def left_behind(base, podman, patience=5.0):
    """What a finished test must not leave: mounts or processes that name its temporary folder,
    and its cgroups (before cleanup(), which removes the empty ones: only cgroups with a process in
    them are a leak). Asked again for up to `patience` seconds: conmon may still be exiting."""
    deadline = time.monotonic() + patience
    while True:
        problems = _left_behind_now(base, podman)
        if not problems or time.monotonic() > deadline:
            return problems
        time.sleep(0.1)


def _left_behind_now(base, podman):
    problems = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            if base in line:
                problems.append("mount: " + line.strip())
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if base in cmdline:
            problems.append(f"process {entry}: {cmdline.strip()}")
    if not podman.had_shm_lock and os.path.exists(SHM_LOCK):
        problems.append(f"podman's lock file {SHM_LOCK} (made by this test)")
    for top in podman.cgroup_dirs():
        for dirpath, _dirs, files in os.walk(top):
            procs = os.path.join(dirpath, "cgroup.procs")
            if "cgroup.procs" in files:
                with open(procs) as f:
                    pids = f.read().split()
                if pids:
                    problems.append(f"cgroup {dirpath}: processes {' '.join(pids)}")
    return problems


class LineReader:
    """Reads a process's standard output line by line on a thread, so the test can wait for a
    line with a timeout."""

    def __init__(self, stream):
        self.lines = []
        self._queue = queue.Queue()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream):
        for line in stream:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, text, timeout):
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            try:
                line = self._queue.get(timeout=remaining)
            except queue.Empty:
                return False
            if line is None:
                self._queue.put(None)
                return False
            self.lines.append(line)
            if line == text or line.startswith(text):
                return True

    def rest(self, timeout=10):
        self._thread.join(timeout)
        while True:
            try:
                line = self._queue.get_nowait()
            except queue.Empty:
                break
            if line is not None:
                self.lines.append(line)
        return self.lines


def facts(lines):
    """The probe's key=value lines as a dict."""
    return dict(line.split("=", 1) for line in lines if "=" in line)


def slicectl_status(slicectl, coordinator, env):
    out = subprocess.run([slicectl, "status", "--json"], env=dict(env, SLICE_COORDINATOR_DIR=coordinator),
                         capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise RuntimeError(f"slicectl status --json exited {out.returncode}: {out.stderr}")
    return json.loads(out.stdout)


def tenants_on(status, gpu_uuid):
    for device in status.get("devices", []):
        if device.get("uuid") == gpu_uuid:
            return device.get("tenants", [])
    return []


class FreshHost:
    """A node or host as a container tool first meets it: no coordinator folder and no policy folder
    yet (checked), libslice's host folder written as the device plugin's init container writes it,
    the simulated GPU, and a control folder the test mounts into its containers."""

    def __init__(self, base, libslice, simgpu_lib_dir, checks, what="host"):
        self.coordinator = os.environ.get("SLICE_COORDINATOR_DIR", os.path.join(base, "coordinator"))
        self.policy = os.environ.get("SLICE_POLICY_DIR", os.path.join(base, "policy"))
        checks.check(not os.path.exists(self.coordinator) and not os.path.exists(self.policy),
                     f"a fresh {what}: no coordinator folder and no policy folder yet")
        self.host_lib = os.path.join(base, "host-lib")
        write_host_lib_dir(self.host_lib, libslice)
        self.gpu = SimulatedGpu(base, simgpu_lib_dir)
        self.control = os.path.join(base, "control")
        os.makedirs(self.control)


def write_host_lib_dir(path, libslice, container_lib_dir="/usr/local/libslice"):
    """What the DaemonSet's init container (or an administrator, for CDI) puts on the host:
    libslice.so and an ld.so.preload naming where containers see it."""
    os.makedirs(path, exist_ok=True)
    shutil.copyfile(libslice, os.path.join(path, "libslice.so"))
    os.chmod(os.path.join(path, "libslice.so"), 0o644)
    with open(os.path.join(path, "ld.so.preload"), "w") as f:
        f.write(f"{container_lib_dir}/libslice.so\n")


def run_holding_probe(podman, argv, stderr_path, control, checks, while_holding):
    """Runs the probe's container until it holds its memory, calls while_holding() (what the host
    sees then, e.g. slicectl status; not called when the probe never got there), releases it through
    CONTROL/release and waits for its end. Returns (what while_holding returned, exit code, the
    probe's lines, its standard error). The container is killed if anything fails on the way."""
    print("+ " + " ".join(argv), flush=True)
    with open(stderr_path, "w") as err:
        container = subprocess.Popen(argv, env=podman.env, stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        reader = LineReader(container.stdout)
        holding = reader.wait_for("holding", 40)
        seen = None
        if checks.check(holding, "the probe runs in the container and holds its memory",
                        "\n".join(reader.lines) + "\n" + open(stderr_path).read()):
            seen = while_holding()
        with open(os.path.join(control, "release"), "w"):
            pass
        rc = container.wait(timeout=40)
        lines = reader.rest()
        container = None
    finally:
        if container is not None:
            container.kill()
            container.wait()
    print("probe: " + " | ".join(lines))
    return seen, rc, lines, open(stderr_path).read()
