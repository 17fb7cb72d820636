#!/usr/bin/env python3
"""The device plugin's image, built offline (tests/k8s/CMakeLists.txt: k8s_plugin_image).

packaging/Containerfile builds libslice/slice-device-plugin from the repository with network
(Debian's packages, PyPI's CUDA headers): `cmake --install` under /opt/libslice, on Debian
bookworm-slim with the runtime libraries the tools need. Without a registry or network, this test
builds the equivalent image from this build folder: `cmake --install BUILD --prefix
ROOT/opt/libslice --strip`, the shared libraries the installed tools load (ldd; this host's Debian
files), and the host's sh, install and mv for the DaemonSet's init container (bookworm-slim has the
same Debian binaries); `FROM scratch` + COPY, `podman build` into a private store. Then, in
containers of that image:
  - slice-device-plugin --help, and every installed tool's --help (no library missing);
  - slice-device-plugin --list --slices 4 on the simulated GPU (its libnvidia-ml.so.1 mounted where
    the NVIDIA container toolkit mounts the real one, its state folder shared): both GPUs by UUID,
    4 slices each, and the DaemonSet's own command and arguments with --list;
  - the DaemonSet's init container command, as written in examples/kubernetes, against a folder
    mounted at /host-lib: libslice.so (the installed one) and an ld.so.preload naming where the
    plugin's containers see it, twice (the second as an upgrade);
and the image is removed. Also checked: packaging/Containerfile installs with the same prefix and
library folder as this test, and the DaemonSet copies the library from where the install puts it.
What this does not run: packaging/Containerfile itself (its apt and pip steps need network).

  plugin_image_test.py BUILD_DIR SOURCE_DIR SIMGPU_LIB_DIR CMAKE_INSTALL_LIBDIR CMAKE
Exit 0 passed, 1 failed, 77 skipped (no podman or runc, or not root).
"""
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import podman_support as ps  # noqa: E402

PREFIX = "/opt/libslice"
SHELL_BUILTINS = {"echo", "test", "[", "true", "false", "cd", "exit"}


def daemonset(source_dir):
    try:
        import yaml  # Debian's python3-yaml, as tests/k8s/check_manifests.py
    except ImportError:
        ps.skip("python3-yaml is not installed (scripts/setup.sh installs it): the DaemonSet cannot be read")
    with open(os.path.join(source_dir, "examples/kubernetes/device-plugin-daemonset.yaml")) as f:
        spec = yaml.safe_load(f)["spec"]["template"]["spec"]
    init = next(c for c in spec["initContainers"] if c["name"] == "install-libslice")
    plugin = next(c for c in spec["containers"] if c["name"] == "slice-device-plugin")
    return init, plugin


def install(cmake, build_dir, prefix, log):
    """cmake --install into the staging tree. It writes the build folder's install_manifest.txt:
    the one there before (a real install's, which uninstalling reads) is put back."""
    manifest = os.path.join(build_dir, "install_manifest.txt")
    saved = open(manifest, "rb").read() if os.path.exists(manifest) else None
    try:
        out = subprocess.run([cmake, "--install", build_dir, "--prefix", prefix, "--strip"], capture_output=True,
                             text=True, timeout=120)
    finally:
        if saved is None:
            if os.path.exists(manifest):
                os.remove(manifest)
        else:
            with open(manifest, "wb") as f:
                f.write(saved)
    with open(log, "w") as f:
        f.write(out.stdout + out.stderr)
    return out


def parse_listing(text):
    """slice-device-plugin --list: {uuid: (bytes, slices, slice_bytes, [ids])}."""
    gpus = {}
    current = None
    for line in text.splitlines():
        m = re.match(r"GPU (\d+) (GPU-[0-9a-f-]+) .*: (\d+) bytes, (\d+) slices of (\d+) bytes and (\d+)%$", line)
        if m:
            current = m.group(2)
            gpus[current] = (int(m.group(3)), int(m.group(4)), int(m.group(5)), [])
        elif line.startswith("  ") and current:
            gpus[current][3].append(line.strip())
    return gpus


def main():
    build_dir, source_dir, simgpu_lib_dir, libdir, cmake = sys.argv[1:6]
    ps.require_podman()
    ps.terminate_on_signals()
    base = ps.test_dir()
    checks = ps.Checks()
    started = time.monotonic()
    init, plugin = daemonset(source_dir)

    # ---- the real Containerfile installs as this test does ----
    with open(os.path.join(source_dir, "packaging/Containerfile")) as f:
        containerfile = f.read()
    checks.check(f"-DCMAKE_INSTALL_PREFIX={PREFIX}" in containerfile and "-DCMAKE_INSTALL_LIBDIR=lib" in containerfile
                 and "cmake --install /build --strip" in containerfile
                 and f'CMD ["{PREFIX}/bin/slice-device-plugin"]' in containerfile,
                 f"packaging/Containerfile installs under {PREFIX} with lib/ and runs slice-device-plugin")

    # ---- the image's tree: cmake --install, the libraries, the init container's tools ----
    image_dir = os.path.join(base, "image")
    root = os.path.join(image_dir, "root")
    out = install(cmake, build_dir, root + PREFIX, os.path.join(base, "install.log"))
    if not checks.check(out.returncode == 0, f"cmake --install --prefix ROOT{PREFIX} --strip",
                        out.stdout[-2000:] + out.stderr):
        return checks.finish()
    checks.check(libdir == "lib", "the build's CMAKE_INSTALL_LIBDIR is lib, as packaging/Containerfile sets it",
                 f"this build folder was configured with CMAKE_INSTALL_LIBDIR={libdir}: the image's layout differs")
    init_script = init["command"][-1]
    copied = re.search(r"install -m 0?644 (\S+) /host-lib/", init_script)
    library = copied.group(1) if copied else ""
    checks.check(library == f"{PREFIX}/lib/libslice/libslice.so" and os.path.isfile(root + library),
                 "the DaemonSet's init container copies libslice.so from where the install puts it",
                 f"it copies '{library}'; the install has: "
                 + " ".join(os.path.relpath(os.path.join(d, n), root) for d, _s, names in os.walk(root + PREFIX)
                            for n in names if n == "libslice.so"))
    command = plugin["command"]
    checks.check(os.access(root + command[0], os.X_OK), f"the DaemonSet's command {command[0]} is installed")

    bins = sorted(os.listdir(root + PREFIX + "/bin"))
    for name in bins:
        for library_path in ps.shared_libraries(root + PREFIX + "/bin/" + name):
            ps.copy_from_host(root, library_path)
    # The init container's programs: its shell, and the first word of each command it chains.
    programs = {init["command"][0]}
    for part in re.split(r"&&|\|\||;", init_script):
        words = shlex.split(part)
        if words and words[0] not in SHELL_BUILTINS:
            programs.add(words[0])
    for program in sorted(programs):
        path = shutil.which(program)
        if not checks.check(path is not None, f"the init container's '{program}' is on this host to copy"):
            continue
        ps.copy_from_host(root, path)
        for library_path in ps.shared_libraries(os.path.realpath(path)):
            ps.copy_from_host(root, library_path)
    # What the simulated driver's NVML needs beyond glibc (the real one needs glibc alone), so that
    # it can be mounted into the image as the NVIDIA container toolkit mounts the real one.
    for library_path in ps.shared_libraries(os.path.join(simgpu_lib_dir, "libnvidia-ml.so.1"),
                                            skip_dirs=(simgpu_lib_dir,)):
        ps.copy_from_host(root, library_path)
    with open(os.path.join(image_dir, "Containerfile"), "w") as f:
        f.write(f'FROM scratch\nCOPY root/ /\nCMD ["{PREFIX}/bin/slice-device-plugin"]\n')

    podman = ps.Podman(base)
    ps.remove_stale_cgroups()
    image = f"localhost/libslice/slice-device-plugin:test-{uuid.uuid4().hex[:10]}"
    gpu = ps.SimulatedGpu(base, simgpu_lib_dir)
    host_lib = os.path.join(base, "host-lib")
    os.makedirs(host_lib)
    try:
        out = podman.build(["--network", "none", "--pull=never", "-f", os.path.join(image_dir, "Containerfile"),
                            "-t", image, image_dir])
        if not checks.check(out.returncode == 0, "podman build of the image, FROM scratch",
                            out.stdout[-3000:] + out.stderr[-3000:]):
            return checks.finish()
        size = podman.run(["image", "inspect", "--format", "{{.Size}}", image]).stdout.strip()
        print(f"image {image}: {int(size or 0) / ps.MIB:.1f} MiB; {len(bins)} tools: {' '.join(bins)}")

        out = podman.run_container([], image, [f"{PREFIX}/bin/slice-device-plugin", "--help"])
        checks.check(out.returncode == 0 and out.stdout.startswith("usage: slice-device-plugin"),
                     "slice-device-plugin --help in the image", out.stdout[:300] + out.stderr)
        out = podman.run_container([], image, [init["command"][0], "-c",
                                               f'for t in {PREFIX}/bin/*; do "$t" --help > /dev/null || '
                                               f'{{ echo "$t failed"; exit 1; }}; done'])
        checks.check(out.returncode == 0, "every installed tool answers --help in the image",
                     out.stdout + out.stderr)

        # The simulated GPU's NVML where the NVIDIA container toolkit mounts the real one.
        nvml = ["-v", f"{os.path.realpath(os.path.join(simgpu_lib_dir, 'libnvidia-ml.so.1'))}:"
                      f"{ps.host_library_dir()}/libnvidia-ml.so.1:ro"] + gpu.podman_args()
        out = podman.run_container(nvml, image, [f"{PREFIX}/bin/slice-device-plugin", "--list", "--slices", "4"])
        listing = parse_listing(out.stdout)
        print("--list:\n" + out.stdout)
        expected = {ps.uuid_of_gpu(i): (8 * ps.GIB, 4, 2 * ps.GIB, [f"{ps.uuid_of_gpu(i)}::{k}" for k in range(4)])
                    for i in range(2)}
        checks.check(out.returncode == 0 and listing == expected,
                     "slice-device-plugin --list --slices 4 in the image: both simulated GPUs by UUID, 4 slices "
                     "of 2 GiB each", out.stdout + out.stderr)
        out = podman.run_container(nvml, image, command + plugin.get("args", []) + ["--list"])
        reserve_listing = parse_listing(out.stdout)
        checks.check(out.returncode == 0 and len(reserve_listing) == 2
                     and all(g[1] == 4 and g[2] == (8 * ps.GIB - 512 * ps.MIB) // 4 for g in reserve_listing.values()),
                     "the DaemonSet's command and arguments, with --list, in the image (4 slices after 512Mi)",
                     out.stdout + out.stderr)

        # The DaemonSet's init container, as written, twice: the second as an upgrade.
        for attempt in ("first", "second"):
            out = podman.run_container(["-v", f"{host_lib}:/host-lib"], image, init["command"])
            checks.check(out.returncode == 0, f"the DaemonSet's init container command ({attempt} run)",
                         out.stdout + out.stderr)
        installed = os.path.join(host_lib, "libslice.so")
        same = (os.path.exists(installed)
                and open(installed, "rb").read() == open(root + library, "rb").read())
        mode = stat.S_IMODE(os.stat(installed).st_mode) if os.path.exists(installed) else None
        checks.check(same and mode == 0o644, "it puts the image's libslice.so on the node, 0644",
                     f"mode {mode}, same content {same}")
        preload = open(os.path.join(host_lib, "ld.so.preload")).read() if os.path.exists(
            os.path.join(host_lib, "ld.so.preload")) else ""
        help_text = podman.run_container([], image, [f"{PREFIX}/bin/slice-device-plugin", "--help"]).stdout
        checks.check(preload == "/usr/local/libslice/libslice.so\n"
                     and "where containers see libslice.so; ld.so.preload must name DIR/libslice.so (default "
                         "/usr/local/libslice)" in help_text,
                     "its ld.so.preload names libslice.so where the plugin's containers see it", repr(preload))
        checks.check(sorted(os.listdir(host_lib)) == ["ld.so.preload", "libslice.so"],
                     "nothing else on the node (no half-written .new file)", str(os.listdir(host_lib)))

        out = podman.run(["rmi", image])
        checks.check(out.returncode == 0 and not podman.run(["images", "-q"]).stdout.strip(), "the image is removed",
                     out.stdout + out.stderr)
        gpu.report_container_violations()
        left = ps.left_behind(base, podman)
        checks.check(not left, "no mount, process or cgroup with a process left", "\n".join(left))
    finally:
        podman.cleanup()
    checks.check(not podman.cgroup_dirs(), "the test's cgroups are removed")
    print(f"took {time.monotonic() - started:.1f} s")
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
