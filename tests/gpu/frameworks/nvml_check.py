"""NVML and nvidia-smi under libslice, and whether NVML can see this process at all.

    python3 tests/gpu/frameworks/nvml_check.py [--cap BYTES] [--allow-missing] [--timeout S]

The process holds a context (cuda-bindings: cuInit, cuDeviceGet(0), cuDevicePrimaryCtxRetain, a
64 MiB cuMemAlloc) on the GPU whose UUID cuDeviceGetUuid gives, then:
(a) in-process pynvml: nvmlDeviceGetMemoryInfo(handle of that UUID).total == cap (and
    cuMemGetInfo's total == cap); whether nvmlDeviceGetComputeRunningProcesses lists this PID;
(b) `nvidia-smi --query-gpu=uuid,memory.total --format=csv,noheader,nounits`, run as a child with
    the same environment (LD_PRELOAD and SLICE_* included), shows the cap in MiB for that GPU;
(c) `nvidia-smi --query-compute-apps=pid,used_memory,gpu_uuid --format=csv,noheader,nounits`, with
    the same environment and again without LD_PRELOAD: is this PID listed there?
Passes when (a) and (b) hold, and, where nvidia-smi lists this PID without LD_PRELOAD, it lists it
under LD_PRELOAD too (libslice shows a tenant its own processes). "pid_visible" in the RESULT ((c)
under LD_PRELOAD) tells whether NVML sees this process under its own PID, i.e. whether libslice can
measure and charge context memory here (docs/memory.md: not in a PID namespace).
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_common as cc  # noqa: E402


def call(driver, name, *args):
    result = getattr(driver, name)(*args)
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{name}{args!r} failed: {err}")
    return values[0] if len(values) == 1 else values


def smi(fields_args, env):
    """Run nvidia-smi (found on the PATH: tests/gpu/run.sh puts its folder there); (returncode,
    stdout lines, stderr). Not found, or not runnable: returncode 127 and the reason."""
    try:
        out = subprocess.run(["nvidia-smi"] + fields_args, env=env, capture_output=True, text=True,
                             timeout=30)
    except FileNotFoundError as e:
        return 127, [], f"nvidia-smi is not on the PATH: {e}"
    except (OSError, subprocess.SubprocessError) as e:
        return 127, [], f"nvidia-smi could not run: {type(e).__name__}: {e}"
    return out.returncode, [l.strip() for l in out.stdout.splitlines() if l.strip()], out.stderr.strip()


def apps_pids(lines):
    pids = []
    for line in lines:
        first = line.split(",")[0].strip()
        if first.isdigit():
            pids.append(int(first))
    return pids


def body(args, data):
    cap = cc.cap_from(args)
    data["cap_bytes"] = cap
    pid = os.getpid()
    data["pid"] = pid
    driver = cc.import_cuda_driver()
    pynvml = cc.import_module("pynvml")

    # A context on device 0, holding a little memory, so that NVML has something to list.
    try:
        call(driver, "cuInit", 0)
        count = call(driver, "cuDeviceGetCount")
    except RuntimeError as e:
        cc.no_device("cuda-bindings", str(e))
    if count < 1:
        cc.no_device("cuda-bindings", "cuDeviceGetCount() == 0")
    dev = call(driver, "cuDeviceGet", 0)
    get_uuid = getattr(driver, "cuDeviceGetUuid", None) or getattr(driver, "cuDeviceGetUuid_v2")
    err, raw = get_uuid(dev)
    cc.expect(err == driver.CUresult.CUDA_SUCCESS, f"cuDeviceGetUuid failed: {err}")
    uuid = cc.uuid_text(raw.bytes)
    data["uuid"] = uuid
    ctx = call(driver, "cuDevicePrimaryCtxRetain", dev)
    call(driver, "cuCtxSetCurrent", ctx)
    free, total = call(driver, "cuMemGetInfo")
    data.update(cuda_total_bytes=total, cuda_free_bytes=free)
    ptr = call(driver, "cuMemAlloc", 64 * cc.MiB)
    cc.log(f"device 0 {uuid}: cuMemGetInfo free {cc.fmt_bytes(free)}, total {cc.fmt_bytes(total)}; "
           f"cap {cc.fmt_bytes(cap)}; holding a context and 64 MiB")

    try:
        # (a) NVML in this process.
        pynvml.nvmlInit()
        handle = None
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            u = pynvml.nvmlDeviceGetUUID(h)
            if (u.decode() if isinstance(u, bytes) else u) == uuid:
                handle = h
                data["nvml_index"] = i
        cc.expect(handle is not None, f"NVML has no device with the UUID {uuid}")
        mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
        data.update(nvml_total_bytes=mem.total, nvml_free_bytes=mem.free, nvml_used_bytes=mem.used)
        cc.log(f"(a) nvmlDeviceGetMemoryInfo: total {cc.fmt_bytes(mem.total)}, free "
               f"{cc.fmt_bytes(mem.free)}, used {cc.fmt_bytes(mem.used)}")
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        listed = {p.pid: p.usedGpuMemory for p in procs}
        data["nvml_pids_in_process"] = sorted(listed)
        data["pid_visible_in_process"] = pid in listed
        if pid in listed:
            data["nvml_used_by_this_pid"] = listed[pid]
            cc.log(f"(a) NVML lists this PID {pid} with {cc.fmt_bytes(listed[pid])}")
        else:
            cc.log(f"(a) NVML does not list this PID {pid} (listed: {sorted(listed)}): "
                   "PIDs not visible here, context memory cannot be measured")

        # (b) nvidia-smi, a child with the same environment (env=None keeps variables libslice
        # exported in this process, such as SLICE_TENANT).
        rc, lines, err = smi(["--query-gpu=uuid,memory.total", "--format=csv,noheader,nounits"], None)
        data["smi_gpu_lines"] = lines
        cc.log(f"(b) nvidia-smi --query-gpu=uuid,memory.total (rc {rc}): {lines} {err}")
        cc.expect(rc == 0, f"nvidia-smi --query-gpu failed (rc {rc}): {err[:200]}")
        smi_mib = None
        for line in lines:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) >= 2 and parts[0] == uuid and parts[1].isdigit():
                smi_mib = int(parts[1])
        data["smi_total_mib"] = smi_mib

        # (c) nvidia-smi's process list, with libslice and without.
        apps = ["--query-compute-apps=pid,used_memory,gpu_uuid", "--format=csv,noheader,nounits"]
        rc_c, lines_c, err_c = smi(apps, None)
        rc_p, lines_p, err_p = smi(apps, cc.env_without_preload())
        data.update(smi_apps_lines=lines_c, smi_apps_lines_without_preload=lines_p,
                    pid_visible=rc_c == 0 and pid in apps_pids(lines_c),
                    pid_visible_without_preload=rc_p == 0 and pid in apps_pids(lines_p))
        cc.log(f"(c) nvidia-smi --query-compute-apps under LD_PRELOAD (rc {rc_c}): {lines_c} {err_c}")
        cc.log(f"(c) the same without LD_PRELOAD (rc {rc_p}): {lines_p} {err_p}")
        cc.log(f"(c) this PID {pid} visible: {data['pid_visible']} under LD_PRELOAD, "
               f"{data['pid_visible_without_preload']} without")

        cc.expect(total == cap, f"cuMemGetInfo total {total} is not the cap {cap}")
        cc.expect(mem.total == cap, f"(a) nvmlDeviceGetMemoryInfo total {mem.total} is not the cap {cap}")
        cc.expect(mem.free <= cap, f"(a) nvmlDeviceGetMemoryInfo free {mem.free} is more than the cap")
        cc.expect(not data["pid_visible_without_preload"] or data["pid_visible"],
                  f"(c) nvidia-smi lists this PID {pid} without LD_PRELOAD but not under it: "
                  "libslice hides its own tenant's process")
        cc.expect(smi_mib is not None, f"(b) nvidia-smi has no line for {uuid}: {lines}")
        cc.expect(abs(smi_mib - cap // cc.MiB) <= 1,
                  f"(b) nvidia-smi shows {smi_mib} MiB for {uuid}, the cap is {cap // cc.MiB} MiB")
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
        driver.cuMemFree(ptr)
        driver.cuDevicePrimaryCtxRelease(dev)
    return (f"NVML and nvidia-smi show the cap ({cap // cc.MiB} MiB); "
            f"PID {'visible' if data['pid_visible'] else 'not visible'} to nvidia-smi")


def main():
    args = cc.parser(__doc__.split("\n\n")[0]).parse_args()
    cc.run("nvml", body, args)


if __name__ == "__main__":
    main()
