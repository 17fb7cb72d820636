"""Monitoring tools nobody here wrote (nvitop, nvidia-ml-py) on the simulated NVML: every function
they look up exists, so they print no FunctionNotFound traceback, and what the simulator does not
model reads as N/A (NVML_ERROR_NOT_SUPPORTED) as on a GPU without the feature.

Run by ctest (conformance_nvml_tools) with the simulator's folder on LD_LIBRARY_PATH, its own
SIMGPU_STATE (tests/run_isolated.sh) and SIMGPU_LOAD naming the simgpu-load program.
"""
import ctypes
import os
import re
import subprocess
import sys

import pynvml as N

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def nvml_sweep():
    """The queries common pynvml clients make, each answered without FunctionNotFound."""
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(0)
    expected = {  # query -> its answer on the simulator ("NotSupported" for an NVMLError_NotSupported)
        "nvmlDeviceGetCount": (lambda: N.nvmlDeviceGetCount(), 1),
        "nvmlDeviceGetClockInfo": (lambda: N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_SM), 2520),
        "nvmlDeviceGetMaxClockInfo": (lambda: N.nvmlDeviceGetMaxClockInfo(h, N.NVML_CLOCK_MEM), 10501),
        "nvmlDeviceGetComputeMode": (lambda: N.nvmlDeviceGetComputeMode(h), N.NVML_COMPUTEMODE_DEFAULT),
        "nvmlDeviceGetPerformanceState": (lambda: N.nvmlDeviceGetPerformanceState(h), N.NVML_PSTATE_0),
        "nvmlDeviceGetPersistenceMode": (lambda: N.nvmlDeviceGetPersistenceMode(h), N.NVML_FEATURE_DISABLED),
        "nvmlDeviceGetDisplayActive": (lambda: N.nvmlDeviceGetDisplayActive(h), N.NVML_FEATURE_DISABLED),
        "nvmlDeviceGetDisplayMode": (lambda: N.nvmlDeviceGetDisplayMode(h), N.NVML_FEATURE_DISABLED),
        "nvmlDeviceGetDriverModel": (lambda: N.nvmlDeviceGetDriverModel(h), "NotSupported"),
        "nvmlDeviceGetEncoderUtilization": (lambda: N.nvmlDeviceGetEncoderUtilization(h), "NotSupported"),
        "nvmlDeviceGetDecoderUtilization": (lambda: N.nvmlDeviceGetDecoderUtilization(h), "NotSupported"),
        "nvmlDeviceGetFanSpeed": (lambda: N.nvmlDeviceGetFanSpeed(h), "NotSupported"),
        "nvmlDeviceGetTemperature": (lambda: N.nvmlDeviceGetTemperature(h, N.NVML_TEMPERATURE_GPU), "NotSupported"),
        "nvmlDeviceGetTemperatureV": (lambda: N.nvmlDeviceGetTemperatureV(h, N.NVML_TEMPERATURE_GPU), "NotSupported"),
        "nvmlDeviceGetPowerUsage": (lambda: N.nvmlDeviceGetPowerUsage(h), "NotSupported"),
        "nvmlDeviceGetPowerManagementLimit": (lambda: N.nvmlDeviceGetPowerManagementLimit(h), "NotSupported"),
        "nvmlDeviceGetEnforcedPowerLimit": (lambda: N.nvmlDeviceGetEnforcedPowerLimit(h), "NotSupported"),
        "nvmlDeviceGetTotalEccErrors": (lambda: N.nvmlDeviceGetTotalEccErrors(h, 1, 0), "NotSupported"),
        "nvmlDeviceGetBAR1MemoryInfo": (lambda: N.nvmlDeviceGetBAR1MemoryInfo(h), "NotSupported"),
        "nvmlDeviceGetPcieThroughput": (lambda: N.nvmlDeviceGetPcieThroughput(h, 0), "NotSupported"),
        "nvmlDeviceGetMigMode": (lambda: N.nvmlDeviceGetMigMode(h), "NotSupported"),
        "nvmlDeviceIsMigDeviceHandle": (lambda: N.nvmlDeviceIsMigDeviceHandle(h), 0),
        "nvmlDeviceGetSerial": (lambda: N.nvmlDeviceGetSerial(h), "NotSupported"),
        "nvmlDeviceGetArchitecture": (lambda: N.nvmlDeviceGetArchitecture(h), N.NVML_DEVICE_ARCH_ADA),
        "nvmlDeviceGetGraphicsRunningProcesses": (lambda: N.nvmlDeviceGetGraphicsRunningProcesses(h), []),
        "nvmlDeviceGetMPSComputeRunningProcesses": (lambda: N.nvmlDeviceGetMPSComputeRunningProcesses(h), []),
        "nvmlDeviceGetFieldValues": (
            lambda: [v.nvmlReturn for v in N.nvmlDeviceGetFieldValues(h, [1, 2])],
            [N.NVML_ERROR_NOT_SUPPORTED] * 2),
        "nvmlDeviceGetHandleByUUIDV": (
            lambda: ctypes.cast(N.nvmlDeviceGetHandleByUUIDV(N.nvmlDeviceGetUUID(h).encode(), N.NVML_UUID_TYPE_ASCII),
                                ctypes.c_void_p).value == ctypes.cast(h, ctypes.c_void_p).value, True),
    }
    for name, (call, want) in expected.items():
        try:
            got = call()
            if isinstance(got, ctypes.c_uint):
                got = got.value
        except N.NVMLError_NotSupported:
            got = "NotSupported"
        except N.NVMLError as e:
            got = f"{type(e).__name__}: {e}"
        check(got == want, f"{name}: {got!r}, expected {want!r}")
    N.nvmlShutdown()


def nvitop_api():
    """Every no-argument query of nvitop's Device: nothing logged (nvitop logs each failed lookup)."""
    code = """
import inspect, nvitop
d = nvitop.Device(0)
for name, m in inspect.getmembers(d, predicate=inspect.ismethod):
    if name.startswith('_') or name in ('mig_device', 'mig_devices', 'to_leaf_devices', 'oneshot'):
        continue
    params = inspect.signature(m).parameters.values()
    if all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        m()
print(d.as_snapshot())
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    check(done.returncode == 0, f"nvitop's Device queries failed: {done.stderr[-3000:]}")
    check(done.stderr == "", f"nvitop's Device queries wrote to stderr:\n{done.stderr[-3000:]}")


def nvitop_once():
    """nvitop --once with a busy process: no traceback, and the values of a headless P0 Linux GPU."""
    load = subprocess.Popen([os.environ["SIMGPU_LOAD"], "--seconds", "20"], stdout=subprocess.DEVNULL)
    try:
        env = dict(os.environ, TERM="xterm", COLUMNS="160", LINES="50")
        done = subprocess.run([sys.executable, "-m", "nvitop", "--once"], env=env, capture_output=True, text=True,
                              timeout=60)
    finally:
        load.kill()
        load.wait()
    report = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]", "", done.stdout)
    check(done.returncode == 0, f"nvitop --once exited {done.returncode}")
    check("Traceback" not in done.stderr and "FunctionNotFound" not in done.stderr,
          f"nvitop --once printed a traceback:\n{done.stderr[-3000:]}")
    check(re.search(r"SimGPU\s+Off\s+│\s+00000000:17:00\.0\s+Off\s+│", report) is not None,
          f"persistence mode and display active are not Off:\n{report}")
    check(re.search(r"N/A\s+N/A\s+P0\s+N/A / N/A\s+│", report) is not None,
          f"fan, temperature and power are not N/A in P0:\n{report}")
    check(re.search(r"\d+%\s+Default\s+│", report) is not None, f"the compute mode is not Default:\n{report}")
    check(re.search(rf"^│\s+0\s+{load.pid}\s", report, re.M) is not None,
          f"the busy process {load.pid} is not listed:\n{report}")


nvml_sweep()
nvitop_api()
nvitop_once()
print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
