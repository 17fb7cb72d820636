"""The same steps as context_ctypes.py through NVIDIA's cuda-bindings (cuda.bindings.driver, from
PyPI), which also crashed at its first context on a real GPU under libslice at b9e6429 (issue 22)."""
import sys

from process_facts import Facts

facts = Facts()  # the key is made before the driver is loaded
from cuda.bindings import driver as cu  # noqa: E402  (loads the driver)


def call(name, result):
    err, *values = result if isinstance(result, tuple) else (result,)
    facts.call(name, int(err))
    return values[0] if len(values) == 1 else values


call("cuInit", cu.cuInit(0))
dev = call("cuDeviceGet", cu.cuDeviceGet(0))
ctx = call("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain(dev))
call("cuCtxSetCurrent", cu.cuCtxSetCurrent(ctx))
small = call("cuMemAlloc_v2 64 MiB", cu.cuMemAlloc(64 << 20))
large = call("cuMemAlloc_v2 512 MiB", cu.cuMemAlloc(512 << 20))
free, total = call("cuMemGetInfo_v2", cu.cuMemGetInfo())
facts.value("total", total)
if large is not None and int(large) != 0:
    cu.cuMemFree(large)
call("cuMemFree_v2", cu.cuMemFree(small))
call("cuDevicePrimaryCtxRelease_v2", cu.cuDevicePrimaryCtxRelease(dev))
sys.exit(facts.done())
