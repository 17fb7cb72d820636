"""numba-cuda under libslice (the driver API through its own bindings).

    python3 tests/gpu/frameworks/numba_check.py [--cap BYTES] [--allow-missing] [--timeout S]

cuda.current_context().get_memory_info() total == cap; cuda.device_array() of 256 MiB (uint8)
until the driver's CUDA_ERROR_OUT_OF_MEMORY, which numba raises as
numba.cuda.cudadrv.driver.CudaAPIError with .code == 2 (after flushing its pending deallocations
and retrying once); it must come at the cap. Then the arrays are freed (numba defers frees: the
pending deallocations are flushed), memory comes back, and a tiny @cuda.jit kernel gives the right
answer. The type and code of the refusal are reported.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_common as cc  # noqa: E402

CUDA_ERROR_OUT_OF_MEMORY = 2


def error_code(e):
    code = getattr(e, "code", None)
    try:
        return int(getattr(code, "value", code))
    except (TypeError, ValueError):
        return None


def is_oom(e):
    return error_code(e) == CUDA_ERROR_OUT_OF_MEMORY or "OUT_OF_MEMORY" in str(e)


def flush_deallocations(ctx):
    """numba frees device arrays lazily; flush what is pending (both the context's and its memory
    manager's list, which newer numba-cuda keeps)."""
    for owner in (ctx, getattr(ctx, "memory_manager", None)):
        pending = getattr(owner, "deallocations", None)
        if pending is not None and hasattr(pending, "clear"):
            pending.clear()


def body(args, data):
    cap = cc.cap_from(args)
    data["cap_bytes"] = cap
    np = cc.import_module("numpy")
    numba = cc.import_module("numba")
    cuda = cc.import_module("numba.cuda")
    cc.log(f"numba {numba.__version__}")
    try:
        available = cuda.is_available()
    except Exception as e:
        available, detail = False, f"{type(e).__name__}: {e}"
    else:
        detail = "numba.cuda.is_available() is False"
    if not available:
        cc.no_device("numba", detail)
    try:
        from numba.cuda.cudadrv.driver import CudaAPIError
    except ImportError:
        CudaAPIError = None
    data["driver_binding"] = "cuda-bindings" if getattr(
        getattr(numba, "config", None), "CUDA_USE_NVIDIA_BINDING", True) else "ctypes"

    ctx = cuda.current_context()
    free0, total = ctx.get_memory_info()
    context = cc.memory_at_start("get_memory_info", free0, total, cap, data, cuda.get_current_device().name)

    blocks, refusal = cc.fill_until_refused(
        lambda n: cuda.device_array(n, dtype=np.uint8), is_oom, cap, label="device array")
    n = len(blocks)
    data.update(refusal=f"{type(refusal).__module__}.{type(refusal).__name__}",
                refusal_code=error_code(refusal),
                refusal_is_CudaAPIError=CudaAPIError is not None and isinstance(refusal, CudaAPIError))
    cc.log(f"refusal: {data['refusal']}, code {data['refusal_code']}")
    del refusal
    data["free_bytes_at_refusal"] = ctx.get_memory_info()[0]
    peak = cc.truth("at the refusal")
    data["nvml_used_at_refusal"] = peak
    cc.check_refusal_point(n, cc.BLOCK, cap, context, data)
    cc.check_truth_under_cap(peak, cap, "at the refusal")

    blocks.clear()
    del blocks
    flush_deallocations(ctx)
    cuda.synchronize()
    free_back = ctx.get_memory_info()[0]
    data["free_bytes_after_free"] = free_back
    cc.log(f"after freeing: get_memory_info free {cc.fmt_bytes(free_back)}")
    data["nvml_used_after_free"] = cc.truth("after freeing")
    cc.expect(free_back >= free0 - 256 * cc.MiB,
              f"memory did not come back: free {cc.fmt_bytes(free_back)}, {cc.fmt_bytes(free0)} at start")

    size = min(cc.GiB, free_back - 512 * cc.MiB)  # a kernel never runs at the edge of the cap
    cc.expect(size >= 256 * cc.MiB, f"only {cc.fmt_bytes(free_back)} free after recovery")
    big = cuda.device_array(size, dtype=np.uint8)
    data["recovery_bytes"] = size

    @cuda.jit
    def add_one(a):
        i = cuda.grid(1)
        if i < a.size:
            a[i] += 1

    host = np.arange(4096, dtype=np.int32)
    dev = cuda.to_device(host)
    add_one[(host.size + 255) // 256, 256](dev)
    back = dev.copy_to_host()
    cc.expect(bool((back == host + 1).all()), f"the @cuda.jit kernel gave {back[:8]}..., expected {host[:8] + 1}...")
    cuda.synchronize()
    cc.log(f"recovery: allocated {cc.fmt_bytes(size)} again; @cuda.jit kernel correct")
    del big, dev
    flush_deallocations(ctx)
    return f"total == cap; refused after {n} x 256 MiB (code {data['refusal_code']}); kernel correct"


def main():
    args = cc.parser(__doc__.split("\n\n")[0]).parse_args()
    cc.run("numba", body, args)


if __name__ == "__main__":
    main()
