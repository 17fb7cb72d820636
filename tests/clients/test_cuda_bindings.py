"""NVIDIA's cuda-bindings (cuda.bindings.driver), a client nobody here wrote, on the simulated GPU."""
import ctypes
import os
import time

from cuda.bindings import driver as cu

from conftest import process_entry, simgpu_stat

SPIN_PTX = b"""
.version 8.0
.target sm_80
.address_size 64
.visible .entry spin(.param .u64 spin_param_0) { ret; }
"""


def check(result):
    err, *values = result if isinstance(result, tuple) else (result,)
    assert err == cu.CUresult.CUDA_SUCCESS, err
    return values[0] if len(values) == 1 else values


def context():
    check(cu.cuInit(0))
    dev = check(cu.cuDeviceGet(0))
    ctx = check(cu.cuDevicePrimaryCtxRetain(dev))
    check(cu.cuCtxSetCurrent(ctx))
    return dev


def test_initialise_allocate_load_launch_synchronise():
    dev = context()
    assert check(cu.cuDeviceGetName(64, dev)).rstrip(b"\0 ") == b"NVIDIA SimGPU"
    free0, total = check(cu.cuMemGetInfo())
    ptr = check(cu.cuMemAlloc(64 << 20))
    free1, _ = check(cu.cuMemGetInfo())
    assert free0 - free1 == 64 << 20
    check(cu.cuMemcpyHtoD(ptr, b"simulated bytes!", 16))
    back = bytearray(16)
    check(cu.cuMemcpyDtoH(back, ptr, 16))
    assert bytes(back) == b"simulated bytes!"

    module = check(cu.cuModuleLoadData(SPIN_PTX))
    spin = check(cu.cuModuleGetFunction(module, b"spin"))
    stream = check(cu.cuStreamCreate(0))
    ns = 50_000_000
    started = time.monotonic()
    check(cu.cuLaunchKernel(spin, 1, 1, 1, 32, 1, 1, 0, stream, ((ns,), (ctypes.c_ulonglong,)), 0))
    check(cu.cuStreamSynchronize(stream))
    assert time.monotonic() - started >= 0.049

    me = process_entry(simgpu_stat(), os.getpid())
    assert me is not None and me["kernels"] == 1
    assert me["busy_ns"] == ns
    assert me["memory_bytes"] == 64 << 20
    check(cu.cuMemFree(ptr))
    assert check(cu.cuMemGetInfo())[0] == free0


def test_allocations_are_refused_exactly_at_the_device_size():
    context()
    free0, total = check(cu.cuMemGetInfo())
    chunk = 1 << 30
    held = []
    while True:
        err, ptr = cu.cuMemAlloc(chunk)
        if err != cu.CUresult.CUDA_SUCCESS:
            assert err == cu.CUresult.CUDA_ERROR_OUT_OF_MEMORY
            break
        held.append(ptr)
        assert len(held) <= total // chunk
    assert len(held) == free0 // chunk
    for ptr in held:
        check(cu.cuMemFree(ptr))


def test_error_names_come_from_the_driver():
    assert check(cu.cuGetErrorName(cu.CUresult.CUDA_ERROR_OUT_OF_MEMORY)) == b"CUDA_ERROR_OUT_OF_MEMORY"
    assert check(cu.cuGetErrorString(cu.CUresult.CUDA_ERROR_OUT_OF_MEMORY)) == b"out of memory"
