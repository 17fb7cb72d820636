"""The six lines that crashed on a real GPU under libslice at b9e6429 (issue 22), and a little more:
plain ctypes, the way a Python program reaches the driver without any framework. It makes a pthread
key of its own first (as CPython does), then: cuInit, a primary context, 64 MiB, 512 MiB (past a
256 MiB cap when one is set), the memory report, the context released. Prints one KEY=VALUE line
per fact (process_facts.py) and exits 0 when every call answered."""
import ctypes
import sys

from process_facts import Facts

facts = Facts()  # the key is made before the driver is loaded
cuda = ctypes.CDLL("libcuda.so.1")
dev, ctx, small, large = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64(), ctypes.c_uint64()
free, total = ctypes.c_size_t(), ctypes.c_size_t()
facts.call("cuInit", cuda.cuInit(0))
facts.call("cuDeviceGet", cuda.cuDeviceGet(ctypes.byref(dev), 0))
facts.call("cuDevicePrimaryCtxRetain", cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
facts.call("cuCtxSetCurrent", cuda.cuCtxSetCurrent(ctx))
facts.call("cuMemAlloc_v2 64 MiB", cuda.cuMemAlloc_v2(ctypes.byref(small), ctypes.c_size_t(64 << 20)))
facts.call("cuMemAlloc_v2 512 MiB", cuda.cuMemAlloc_v2(ctypes.byref(large), ctypes.c_size_t(512 << 20)))
facts.call("cuMemGetInfo_v2", cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)))
facts.value("total", total.value)
if large.value:
    cuda.cuMemFree_v2(ctypes.c_uint64(large.value))
facts.call("cuMemFree_v2", cuda.cuMemFree_v2(ctypes.c_uint64(small.value)))
facts.call("cuDevicePrimaryCtxRelease_v2", cuda.cuDevicePrimaryCtxRelease_v2(dev))
sys.exit(facts.done())
