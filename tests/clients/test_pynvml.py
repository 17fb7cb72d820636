"""nvidia-ml-py (pynvml), a client nobody here wrote, reading the simulated GPU."""
import os

import pynvml

from conftest import simgpu_stat


def test_name_uuid_memory_and_processes(load_process):
    pynvml.nvmlInit()
    try:
        assert pynvml.nvmlDeviceGetCount() == 1
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        truth = simgpu_stat()["devices"][0]
        assert pynvml.nvmlDeviceGetName(handle) == "NVIDIA SimGPU"
        assert pynvml.nvmlDeviceGetUUID(handle) == truth["uuid"]
        assert pynvml.nvmlDeviceGetHandleByUUID(truth["uuid"]) is not None

        mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
        assert mem.total == truth["total_bytes"] == 24 << 30
        assert mem.used == truth["used_bytes"] == 0

        proc = load_process("--seconds", "30", "--alloc-mib", "512", "--kernel-us", "1000")
        mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
        assert mem.used == 512 << 20
        assert mem.free == mem.total - mem.used
        mem2 = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
        assert (mem2.total, mem2.used) == (mem.total, mem.used)

        # This test process may hold a context of its own from the cuda-bindings tests: leave it out.
        procs = [p for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle) if p.pid != os.getpid()]
        assert [(p.pid, p.usedGpuMemory) for p in procs] == [(proc.pid, 512 << 20)]
    finally:
        pynvml.nvmlShutdown()


def test_a_killed_process_disappears_and_its_memory_returns(load_process):
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        proc = load_process("--seconds", "30", "--alloc-mib", "2048")
        assert pynvml.nvmlDeviceGetMemoryInfo(handle).used == 2048 << 20
        proc.kill()
        proc.wait()
        assert pynvml.nvmlDeviceGetMemoryInfo(handle).used == 0
        others = [p for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle) if p.pid != os.getpid()]
        assert others == []
    finally:
        pynvml.nvmlShutdown()
