#!/usr/bin/env python3
"""podman with slice-device-plugin's Allocate (tests/k8s/CMakeLists.txt: k8s_podman_allocate).

The kubelet's part is played by k8s_allocate_client (a fake kubelet: registration, ListAndWatch,
Allocate of 2 slices of GPU 1); its ContainerAllocateResponse becomes podman's options as a
container runtime applies it: each env as --env, each mount as -v HOST:CONTAINER[:ro], each
device as --device, each CDI device as --device NAME. The node is fresh: the plugin makes the
coordinator and policy folders at its start. On top, what else the container gets: the NVIDIA
container runtime's part (CUDA_VISIBLE_DEVICES=NVIDIA_VISIBLE_DEVICES, the driver's libraries in the
root file system) and its own environment, which asks for 6 GiB in every form. Checked: libslice.so
is loaded by the /etc/ld.so.preload mount alone (no LD_PRELOAD); the container sees GPU 1 as its
device 0, cuMemGetInfo reports 4 GiB (2 slices), 4 GiB + 1 MiB is refused and 2 GiB allocated, so
the owner's policy the plugin wrote holds over the container's own environment; `slicectl status
--json` on the host lists the Allocate's tenant with the 4 GiB cap, from the policy, while the probe
holds 2 GiB. At the end nothing is left: no container, mount, process or cgroup.

  podman_allocate_test.py PLUGIN ALLOCATE_CLIENT SLICECTL LIBSLICE PROBE SIMGPU_LIB_DIR
Exit 0 passed, 1 failed, 77 skipped (no podman or runc, or not root).
"""
import json
import os
import signal
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import podman_support as ps  # noqa: E402

SLICE_BYTES = 2 * ps.GIB  # 8 GiB / 4
SLICES = 2
GPU_INDEX = 1


def podman_options(response):
    """A ContainerAllocateResponse as podman's options, as a container runtime applies it."""
    options = []
    for key, value in sorted(response["envs"].items()):
        options += ["--env", f"{key}={value}"]
    for m in response["mounts"]:
        options += ["-v", f"{m['host_path']}:{m['container_path']}" + (":ro" if m["read_only"] else "")]
    for d in response["devices"]:
        options += ["--device", f"{d['host_path']}:{d['container_path']}:{d['permissions'] or 'rwm'}"]
    for name in response["cdi_devices"]:
        options += ["--device", name]
    return options


def main():
    plugin, client, slicectl, libslice, probe, simgpu_lib_dir = sys.argv[1:7]
    ps.require_podman()
    ps.terminate_on_signals()
    base = ps.test_dir()
    checks = ps.Checks()
    started = time.monotonic()

    host = ps.FreshHost(base, libslice, simgpu_lib_dir, checks, "node")  # after the DaemonSet's init container
    coordinator, policy, host_lib, gpu, control = host.coordinator, host.policy, host.host_lib, host.gpu, host.control
    plugin_dir = os.path.join(base, "dp")  # short: a Unix socket's path has at most 107 characters
    os.makedirs(plugin_dir)

    podman = ps.Podman(base)
    ps.remove_stale_cgroups()
    kubelet = plugin_process = None
    try:
        kubelet = subprocess.Popen([client, plugin_dir, str(GPU_INDEX), str(SLICES)], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        kubelet_out = ps.LineReader(kubelet.stdout)
        if not checks.check(kubelet_out.wait_for("kubelet ready", 20), "the fake kubelet listens"):
            return checks.finish()
        plugin_log = os.path.join(base, "plugin.log")
        with open(plugin_log, "w") as log:
            plugin_process = subprocess.Popen(
                [plugin, "--device-plugin-dir", plugin_dir, "--slices", "4", "--coordinator-dir", coordinator,
                 "--policy-dir", policy, "--host-lib-dir", host_lib, "--log-level", "debug"],
                env=gpu.env, stdout=log, stderr=subprocess.STDOUT)
        got_json = kubelet_out.wait_for("{", 40)
        client_err = ""
        if not got_json:
            kubelet.kill()
            client_err = kubelet.stderr.read()
        if not checks.check(got_json, "the plugin registers and answers Allocate",
                            client_err + open(plugin_log).read()):
            return checks.finish()
        answer = json.loads(kubelet_out.lines[-1])
        kubelet.wait(timeout=10)
        response = answer["response"]
        print("Allocate: " + json.dumps(answer))
        gpu_uuid = ps.uuid_of_gpu(GPU_INDEX)
        tenant = response["envs"].get("SLICE_TENANT", "")
        checks.check(all(i.startswith(gpu_uuid + "::") for i in answer["allocated"]) and
                     len(answer["allocated"]) == SLICES, f"{SLICES} slices of GPU {GPU_INDEX} allocated",
                     str(answer["allocated"]))
        checks.check(response["envs"].get("NVIDIA_VISIBLE_DEVICES") == gpu_uuid and tenant.startswith("k8s-"),
                     "Allocate gives the GPU and a tenant of its own", str(response["envs"]))
        mounts = {m["container_path"]: (m["host_path"], m["read_only"]) for m in response["mounts"]}
        expected = {"/usr/local/libslice/libslice.so": (f"{host_lib}/libslice.so", True),
                    "/etc/ld.so.preload": (f"{host_lib}/ld.so.preload", True),
                    "/run/libslice": (coordinator, False),
                    "/etc/libslice/policy": (policy, True)}
        checks.check(mounts == expected, "Allocate's mounts: libslice.so, ld.so.preload, the coordinator, "
                     "the policy folder (read-only but the coordinator)", json.dumps(mounts))
        policy_file = os.path.join(policy, tenant)
        st = os.stat(policy_file) if tenant and os.path.exists(policy_file) else None
        checks.check(st is not None and st.st_uid == 0 and not (stat.S_IMODE(st.st_mode) & 0o022),
                     "the plugin wrote the tenant's policy, root's and nobody else's to write", policy_file)
        for folder in (coordinator, policy):
            checks.check(os.path.isdir(folder), f"the plugin made {os.path.basename(folder)} at its start")

        rootfs = os.path.join(base, "rootfs")
        ps.add_program(rootfs, probe, "/usr/local/bin/k8s_container_probe", env=gpu.env, skip_dirs=(simgpu_lib_dir,))
        ps.add_simulated_driver(rootfs, simgpu_lib_dir)
        # The container's own environment asks for more than its slices, in every form libslice reads.
        greedy = ["--env", "SLICE_MEMORY_LIMIT=6Gi", "--env", "SLICE_MEMORY_LIMIT_0=6Gi",
                  "--env", "SLICE_MEMORY_LIMIT_GPU_" + gpu_uuid[4:].replace("-", "_") + "=6Gi"]
        # The NVIDIA container runtime shows the container only NVIDIA_VISIBLE_DEVICES's GPUs; the
        # simulated driver does that with CUDA_VISIBLE_DEVICES.
        runtime = ["--env", "CUDA_VISIBLE_DEVICES=" + response["envs"]["NVIDIA_VISIBLE_DEVICES"]]
        options = podman_options(response) + greedy + runtime + gpu.podman_args() + ["-v", f"{control}:/control:ro"]
        stderr_path = os.path.join(base, "container.stderr")
        argv = podman.command(podman.container_args(
            ["--name", "libslice-allocate-" + podman.cgroup[-12:]] + options, ("rootfs", rootfs),
            ["/usr/local/bin/k8s_container_probe", "--over-mib", str(SLICES * SLICE_BYTES // ps.MIB + 1),
             "--under-mib", str(SLICE_BYTES // ps.MIB), "--release", "/control/release", "--timeout", "40"]))
        status, rc, lines, logs = ps.run_holding_probe(
            podman, argv, stderr_path, control, checks, lambda: ps.slicectl_status(slicectl, coordinator, gpu.env))
        got = ps.facts(lines)
        cap = SLICES * SLICE_BYTES
        checks.check(rc == 0 and "done" in lines, "the probe ends well (exit 0)", f"exit {rc}\n{logs}")
        checks.check(got.get("libslice") == "/usr/local/libslice/libslice.so" and got.get("ld_preload") == "unset",
                     "libslice.so is loaded through the mounted /etc/ld.so.preload, without LD_PRELOAD", logs)
        checks.check(got.get("device0") == gpu_uuid, f"the container's device 0 is GPU {GPU_INDEX}", str(got))
        checks.check(got.get("total_bytes") == str(cap),
                     "cuMemGetInfo reports the 4 GiB of 2 slices, not the 6 GiB its env asks for", str(got))
        checks.check(got.get("alloc_over") == "CUDA_ERROR_OUT_OF_MEMORY",
                     "4 GiB + 1 MiB is refused with CUDA_ERROR_OUT_OF_MEMORY", str(got))
        checks.check(got.get("alloc_under") == "CUDA_SUCCESS", "2 GiB is allocated", str(got))
        if status is not None:
            print("slicectl status --json: " + json.dumps(status))
            listed = [t for t in ps.tenants_on(status, gpu_uuid) if t.get("name") == tenant]
            checks.check(len(listed) == 1 and listed[0].get("memory_limit_bytes") == cap
                         and listed[0].get("policy") is True
                         and listed[0].get("memory_used_bytes", 0) >= SLICE_BYTES
                         and len(listed[0].get("processes", [])) == 1,
                         f"slicectl status on the host lists {tenant}: the policy's 4 GiB cap, 2 GiB used, "
                         "1 process", json.dumps(ps.tenants_on(status, gpu_uuid)))
        plugin_process.send_signal(signal.SIGTERM)
        checks.check(plugin_process.wait(timeout=15) == 0, "the plugin exits 0 on SIGTERM", open(plugin_log).read())
        plugin_process = None
        gpu.report_container_violations()
        left = ps.left_behind(base, podman)
        checks.check(not left, "no mount, process or cgroup with a process left", "\n".join(left))
    finally:
        for process in (plugin_process, kubelet):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
        podman.cleanup()
    checks.check(not podman.cgroup_dirs(), "the test's cgroups are removed")
    print(f"took {time.monotonic() - started:.1f} s")
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
