"""A client process that the preloaded tests drive: it does what a real program does with NVIDIA's
cuda-bindings (cuda.bindings.driver) and nvidia-ml-py (pynvml), one request at a time, and answers
each with one JSON line. The tests start it with LD_PRELOAD=libslice.so and the SLICE_* variables of
the case, so every call below goes through libslice as it would in any other program.

  sliced_client.py              requests from stdin, one JSON object a line ({"op": NAME, ...})
  sliced_client.py REQUEST...   each argument one JSON request; answers on stdout, then exits

Nothing is imported before a request needs it: a process that only asks NVML questions never loads
the CUDA driver, as a monitor would not.
"""
import ctypes
import json
import subprocess
import sys


class Client:
    def __init__(self):
        self.cu = None
        self.held = []  # device pointers, oldest first
        self.nvml = None

    # ---- CUDA driver API (cuda.bindings.driver) ----

    def _driver(self):
        if self.cu is None:
            from cuda.bindings import driver

            self.cu = driver
        return self.cu

    @staticmethod
    def _name(err):
        return err.name

    def op_init(self):
        """cuInit, then device 0's primary context, made current."""
        cu = self._driver()
        (err,) = cu.cuInit(0)
        answer = {"cuInit": self._name(err)}
        if err != cu.CUresult.CUDA_SUCCESS:
            return answer
        err, dev = cu.cuDeviceGet(0)
        assert err == cu.CUresult.CUDA_SUCCESS, err
        err, ctx = cu.cuDevicePrimaryCtxRetain(dev)
        assert err == cu.CUresult.CUDA_SUCCESS, err
        (err,) = cu.cuCtxSetCurrent(ctx)
        assert err == cu.CUresult.CUDA_SUCCESS, err
        return answer

    def op_calls_after_failed_init(self):
        """What later driver calls answer once cuInit has failed (no context can be made)."""
        cu = self._driver()
        answer = {"cuInit": self._name(cu.cuInit(0)[0])}
        answer["cuDeviceGetCount"] = self._name(cu.cuDeviceGetCount()[0])
        answer["cuDeviceGet"] = self._name(cu.cuDeviceGet(0)[0])
        answer["cuMemAlloc"] = self._name(cu.cuMemAlloc(1 << 20)[0])
        answer["cuMemGetInfo"] = self._name(cu.cuMemGetInfo()[0])
        return answer

    def op_alloc(self, size):
        cu = self._driver()
        err, ptr = cu.cuMemAlloc(size)
        if err == cu.CUresult.CUDA_SUCCESS:
            self.held.append(ptr)
        return {"result": self._name(err), "held": len(self.held)}

    def op_fill(self, chunk, most=4096):
        """Allocates blocks of chunk bytes until one is refused; keeps what succeeded."""
        cu = self._driver()
        count = 0
        while count < most:
            err, ptr = cu.cuMemAlloc(chunk)
            if err != cu.CUresult.CUDA_SUCCESS:
                return {"count": count, "refused_with": self._name(err), "held": len(self.held)}
            self.held.append(ptr)
            count += 1
        return {"count": count, "refused_with": None, "held": len(self.held)}

    def op_free(self, count=None):
        """Frees the newest count blocks (all without a count)."""
        cu = self._driver()
        count = len(self.held) if count is None else count
        results = []
        for _ in range(count):
            (err,) = cu.cuMemFree(self.held.pop())
            results.append(self._name(err))
        return {"results": results, "held": len(self.held)}

    def op_mem_info(self):
        cu = self._driver()
        err, free, total = cu.cuMemGetInfo()
        assert err == cu.CUresult.CUDA_SUCCESS, err
        err, dev = cu.cuDeviceGet(0)
        assert err == cu.CUresult.CUDA_SUCCESS, err
        err, device_total = cu.cuDeviceTotalMem(dev)
        assert err == cu.CUresult.CUDA_SUCCESS, err
        return {"free": free, "total": total, "device_total": device_total}

    # ---- NVML (nvidia-ml-py) ----

    def _handle(self):
        import pynvml

        if self.nvml is None:
            pynvml.nvmlInit()
            self.nvml = pynvml
        return pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)

    def op_nvml(self):
        """Memory info (v1, v2) and the running compute processes (v1, v2, v3) of device 0."""
        pynvml, handle = self._handle()
        v1 = pynvml.nvmlDeviceGetMemoryInfo(handle)
        v2 = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
        return {
            "uuid": pynvml.nvmlDeviceGetUUID(handle),
            "memory_v1": {"total": v1.total, "free": v1.free, "used": v1.used},
            "memory_v2": {"total": v2.total, "free": v2.free, "used": v2.used, "reserved": v2.reserved},
            "processes_v3": sorted([p.pid, p.usedGpuMemory] for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)),
            "processes_v2": sorted([p.pid, p.usedGpuMemory] for p in pynvml.nvmlDeviceGetComputeRunningProcesses_v2(handle)),
            "processes_v1": self._processes_v1(pynvml, handle),
        }

    @staticmethod
    def _processes_v1(pynvml, handle):
        """The original nvmlDeviceGetComputeRunningProcesses ABI ({pid, usedGpuMemory}), which
        pynvml no longer calls but older tools (and nvidia-smi of old drivers) do."""

        class ProcessInfoV1(ctypes.Structure):
            _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]

        fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetComputeRunningProcesses")
        count = ctypes.c_uint(0)
        rc = fn(handle, ctypes.byref(count), None)
        if rc == pynvml.NVML_SUCCESS:
            return []
        assert rc == pynvml.NVML_ERROR_INSUFFICIENT_SIZE, rc
        count.value = count.value * 2 + 5
        infos = (ProcessInfoV1 * count.value)()
        rc = fn(handle, ctypes.byref(count), infos)
        assert rc == pynvml.NVML_SUCCESS, rc
        return sorted([infos[i].pid, infos[i].usedGpuMemory] for i in range(count.value))

    # ---- the process ----

    @staticmethod
    def op_tenant():
        """The tenant libslice put this process in, as it tells the program (slice_get_info)."""
        info = (ctypes.c_uint8 * 112)()
        ctypes.c_uint32.from_buffer(info).value = 112
        rc = ctypes.CDLL(None).slice_get_info(0, info)
        return {"tenant": bytes(info[8:72]).split(b"\0")[0].decode() if rc == 0 else None}

    @staticmethod
    def op_getenv(name):
        """The C library's environment (os.environ is a copy taken at start): libslice writes nothing there."""
        libc = ctypes.CDLL(None)
        libc.getenv.restype = ctypes.c_char_p
        value = libc.getenv(name.encode())
        return {"value": None if value is None else value.decode()}

    @staticmethod
    def op_run(argv):
        """Runs a child the way a program does (with os.environ, a copy of the environment taken at
        start), and returns what it printed."""
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        return {"returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr}

    def answer(self, request):
        request = dict(request)
        op = getattr(self, "op_" + request.pop("op"))
        try:
            return op(**request)
        except Exception as e:  # the test reports it, with this process's stderr
            return {"exception": f"{type(e).__name__}: {e}"}


def main():
    client = Client()
    if len(sys.argv) > 1:
        for arg in sys.argv[1:]:
            print(json.dumps(client.answer(json.loads(arg))), flush=True)
        return
    for line in sys.stdin:
        print(json.dumps(client.answer(json.loads(line))), flush=True)


if __name__ == "__main__":
    main()
