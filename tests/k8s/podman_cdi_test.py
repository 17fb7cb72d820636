#!/usr/bin/env python3
"""podman with slice-cdi-gen's CDI spec on a fresh host (tests/k8s/CMakeLists.txt: k8s_podman_cdi).

The host has no coordinator folder and no policy folder yet. slice-cdi-gen writes its spec (for
the simulated GPU's NVML: 2 GPUs of 8 GiB, 4 slices each) into /var/run/cdi, where podman 4.3
looks (it has no setting for another folder), under a file name and a CDI kind of this run's own,
and makes the two folders. Then

  podman run --device KIND=gpu0-1of4 --rootfs ROOTFS k8s_container_probe ...

in a root file system made here from host files: the probe with its libraries and the simulated
driver's libcuda.so.1 and libnvidia-ml.so.1 where the NVIDIA container toolkit puts the real ones.
The simulator's state folder is mounted so that host and container see one GPU. Checked: libslice.so
is loaded by the spec's /etc/ld.so.preload (no LD_PRELOAD), cuMemGetInfo reports the 2 GiB slice,
2 GiB + 1 MiB is refused with CUDA_ERROR_OUT_OF_MEMORY and 1 GiB is allocated; while the probe
holds it, `slicectl status --json` on the host (the spec's host coordinator folder) lists its tenant
with the 2 GiB cap and the 1 GiB; the spec's createRuntime hook (slice-cdi-gen --prepare-coordinator
at --hook-path) runs on the host: at a second container's start, a tenant that a policy manages
(slicectl set, then slicectl rm, as after a reboot) has its live file back. At the end nothing is left: no container, mount, process, cgroup or spec file.

  podman_cdi_test.py CDI_GEN SLICECTL LIBSLICE PROBE SIMGPU_LIB_DIR
Exit 0 passed, 1 failed, 77 skipped (no podman or runc, or not root).
"""
import json
import os
import stat
import subprocess
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import podman_support as ps  # noqa: E402

CDI_DIR = "/var/run/cdi"  # podman 4.3 reads /etc/cdi and /var/run/cdi, and no other folder
SLICE_BYTES = 2 * ps.GIB  # 8 GiB / 4


def remove_stale_specs():
    """Spec files of earlier runs that were killed: their host folders are gone with their test."""
    if not os.path.isdir(CDI_DIR):
        return
    for name in os.listdir(CDI_DIR):
        if not (name.startswith("libslice-test-") and name.endswith(".json")):
            continue
        path = os.path.join(CDI_DIR, name)
        try:
            with open(path) as f:
                spec = json.load(f)
            mounts = spec["devices"][0]["containerEdits"]["mounts"]
            alive = all(os.path.exists(m["hostPath"]) for m in mounts)
        except (OSError, ValueError, KeyError, IndexError):
            alive = False
        if not alive:
            os.remove(path)


def main():
    cdi_gen, slicectl, libslice, probe, simgpu_lib_dir = sys.argv[1:6]
    ps.require_podman()
    ps.terminate_on_signals()
    base = ps.test_dir()
    checks = ps.Checks()
    started = time.monotonic()

    # A fresh host: the folders the spec mounts do not exist yet.
    host = ps.FreshHost(base, libslice, simgpu_lib_dir, checks)
    coordinator, policy, host_lib, gpu, control = host.coordinator, host.policy, host.host_lib, host.gpu, host.control
    tool_env = dict(gpu.env, SLICE_COORDINATOR_DIR=coordinator, SLICE_POLICY_DIR=policy)

    podman = ps.Podman(base)
    ps.remove_stale_cgroups()
    remove_stale_specs()
    tag = uuid.uuid4().hex[:10]
    kind = f"t{tag}.test.libslice.io/slice"
    made_cdi_dir = not os.path.isdir(CDI_DIR)
    spec_path = os.path.join(CDI_DIR, f"libslice-test-{tag}.json")
    hook = os.path.realpath(cdi_gen)
    try:
        out = subprocess.run([cdi_gen, "--output", spec_path, "--slices", "4", "--kind", kind,
                              "--coordinator-dir", coordinator, "--policy-dir", policy, "--host-lib-dir", host_lib,
                              "--hook-path", hook],
                             env=tool_env, capture_output=True, text=True, timeout=30)
        if not checks.check(out.returncode == 0, "slice-cdi-gen writes the spec into " + CDI_DIR,
                            out.stdout + out.stderr):
            return checks.finish()
        with open(spec_path) as f:
            spec = json.load(f)
        device = next(d for d in spec["devices"] if d["name"] == "gpu0-1of4")
        edits = device["containerEdits"]
        env = dict(e.split("=", 1) for e in edits["env"])
        gpu_uuid = env.get("NVIDIA_VISIBLE_DEVICES", "")
        limit_name = "SLICE_MEMORY_LIMIT_GPU_" + gpu_uuid[4:].replace("-", "_")
        checks.check(env.get(limit_name) == str(SLICE_BYTES), f"the spec's gpu0-1of4 is 2 GiB ({limit_name})",
                     str(env))
        hooks = edits.get("hooks", [])
        checks.check(len(hooks) == 1 and hooks[0]["hookName"] == "createRuntime" and hooks[0]["path"] == hook
                     and os.access(hooks[0]["path"], os.X_OK)
                     and hooks[0]["args"][1:] == ["--prepare-coordinator", coordinator, "--policy-dir", policy],
                     "the createRuntime hook is slice-cdi-gen --prepare-coordinator at its host path", str(hooks))
        out = subprocess.run([cdi_gen, "--output", "-", "--slices", "4"], env=tool_env, capture_output=True,
                             text=True, timeout=30)
        default_hook = json.loads(out.stdout)["devices"][0]["containerEdits"]["hooks"][0]["path"] \
            if out.returncode == 0 else out.stderr
        checks.check(default_hook == hook, "without --hook-path the hook is where slice-cdi-gen runs from",
                     default_hook)
        for folder, mode in ((coordinator, 0o1777), (policy, 0o755)):
            st = os.stat(folder) if os.path.isdir(folder) else None
            checks.check(st is not None and st.st_uid == 0 and stat.S_IMODE(st.st_mode) == mode,
                         f"writing the spec made {os.path.basename(folder)} (root's, {mode:o})",
                         f"uid {st.st_uid} mode {stat.S_IMODE(st.st_mode):o}" if st else "missing")

        rootfs = os.path.join(base, "rootfs")
        ps.add_program(rootfs, probe, "/usr/local/bin/k8s_container_probe", env=gpu.env, skip_dirs=(simgpu_lib_dir,))
        ps.add_simulated_driver(rootfs, simgpu_lib_dir)

        stderr_path = os.path.join(base, "container.stderr")
        name = f"libslice-cdi-{tag}"
        argv = podman.command(podman.container_args(
            ["--name", name, "--device", f"{kind}=gpu0-1of4", "-v", f"{control}:/control:ro"] + gpu.podman_args(),
            ("rootfs", rootfs),
            ["/usr/local/bin/k8s_container_probe", "--over-mib", str(SLICE_BYTES // ps.MIB + 1),
             "--under-mib", "1024", "--release", "/control/release", "--timeout", "40"]))
        status, rc, lines, logs = ps.run_holding_probe(
            podman, argv, stderr_path, control, checks, lambda: ps.slicectl_status(slicectl, coordinator, gpu.env))
        probe_facts = ps.facts(lines)
        checks.check(rc == 0 and "done" in lines, "the probe ends well (exit 0)", f"exit {rc}\n{logs}")
        checks.check(probe_facts.get("libslice") == "/usr/local/libslice/libslice.so"
                     and probe_facts.get("ld_preload") == "unset",
                     "libslice.so is loaded through the spec's /etc/ld.so.preload, without LD_PRELOAD", logs)
        checks.check(probe_facts.get("device0") == gpu_uuid, "the container's device 0 is the spec's GPU",
                     str(probe_facts))
        checks.check(probe_facts.get("total_bytes") == str(SLICE_BYTES), "cuMemGetInfo reports the 2 GiB slice",
                     str(probe_facts))
        checks.check(probe_facts.get("alloc_over") == "CUDA_ERROR_OUT_OF_MEMORY",
                     "2 GiB + 1 MiB is refused with CUDA_ERROR_OUT_OF_MEMORY", str(probe_facts))
        checks.check(probe_facts.get("alloc_under") == "CUDA_SUCCESS", "1 GiB is allocated", str(probe_facts))
        checks.check(" refused" in logs, "libslice said why (its warn line)", logs)
        if status is not None:
            tenants = [t for t in ps.tenants_on(status, gpu_uuid) if t.get("memory_used_bytes", 0) > 0]
            print("slicectl status --json: " + json.dumps(status))
            totals = {d.get("uuid"): d.get("total_bytes") for d in status.get("devices", [])}
            checks.check(totals.get(gpu_uuid) == 8 * ps.GIB, "host and container share one simulated machine "
                         "(the GPU's 8 GiB on the host)", str(totals))
            checks.check(len(tenants) == 1 and tenants[0].get("memory_limit_bytes") == SLICE_BYTES
                         and tenants[0].get("memory_used_bytes", 0) >= ps.GIB
                         and len(tenants[0].get("processes", [])) == 1,
                         "slicectl status on the host lists the container's tenant: 2 GiB cap, 1 GiB used, "
                         "1 process", json.dumps(tenants))

        # The hook: a tenant that a policy manages, its live file gone (as after a reboot); a second
        # container's start makes it again, on the host.
        for args in (["set", "hooked", "--memory", "1Gi"], ["rm", "hooked"]):
            out = subprocess.run([slicectl] + args, env=tool_env, capture_output=True, text=True, timeout=30)
            checks.check(out.returncode == 0, "slicectl " + " ".join(args), out.stdout + out.stderr)
        hooked = os.path.join(coordinator, "tenants", "hooked")
        checks.check(not os.path.exists(hooked), "before the second container: the managed tenant has no live file")
        out = podman.run_container(["--device", f"{kind}=gpu0-1of4"] + gpu.podman_args(), ("rootfs", rootfs),
                                   ["/usr/local/bin/k8s_container_probe"])
        checks.check(out.returncode == 0, "a second container with the device starts", out.stdout + out.stderr)
        st = os.lstat(hooked) if os.path.lexists(hooked) else None
        checks.check(st is not None and st.st_uid == 0 and stat.S_ISREG(st.st_mode),
                     "the createRuntime hook ran on the host: the managed tenant's live file is back, root's")
        gpu.report_container_violations()
        left = ps.left_behind(base, podman)
        checks.check(not left, "no mount, process or cgroup with a process left", "\n".join(left))
    finally:
        podman.cleanup()
        for path in (spec_path, spec_path + ".tmp"):
            if os.path.exists(path):
                os.remove(path)
        if made_cdi_dir:
            try:
                os.rmdir(CDI_DIR)
            except OSError:
                pass
    checks.check(not os.path.exists(spec_path) and not podman.cgroup_dirs(),
                 "the spec file and the test's cgroups are removed")
    print(f"took {time.monotonic() - started:.1f} s")
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
