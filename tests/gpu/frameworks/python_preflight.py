"""The first Python check under libslice: does a Python process that makes a CUDA context live?

    python3 tests/gpu/frameworks/python_preflight.py --step ctypes|cuda-bindings|torch [--cap BYTES]
        [--allow-missing] [--timeout S]

On the first real GPU every Python program that made a context crashed under libslice (SIGSEGV in the
driver, issue 22), and the crash showed only deep in the framework checks. tests/gpu/run.sh runs each
step in a process of its own under a 1 GiB cap, right after its C preflight, so that a crash is one
named line at the top of the results, and the step it happened in says how deep it goes:
- ctypes: libcuda.so.1 through ctypes.CDLL, no framework: cuInit, cuDeviceGet,
  cuDevicePrimaryCtxRetain, cuCtxSetCurrent, cuMemGetInfo_v2 (total == the cap), cuMemAlloc_v2 of
  1 MiB, cuMemFree_v2, cuDevicePrimaryCtxRelease_v2;
- cuda-bindings: the same through `from cuda.bindings import driver` (missing: FAIL, or SKIP with
  --allow-missing);
- torch: `torch.ones(1, device="cuda")` and its sum, and mem_get_info()'s total == the cap.
Each call is announced before it is made, and faulthandler is on, so that the log of a crashed step
ends with the call and the Python stack it died in. The contract is check_common's (RESULT line,
exit 0/1/3); a crash has no RESULT: run.sh reports the signal.
"""
import faulthandler
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_common as cc  # noqa: E402

ALLOCATION = cc.MiB


def announce(call):
    cc.log(f"calling {call}")


def step_ctypes(cap, data):
    import ctypes
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        cc.no_device("ctypes", f"libcuda.so.1 does not load: {e}")
    dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    free, total = ctypes.c_size_t(), ctypes.c_size_t()

    def call(name, *args):
        announce(name)
        rc = getattr(cuda, name)(*args)
        data.setdefault("calls", []).append(name)
        if rc != 0:
            if name == "cuInit" and rc == 100:  # CUDA_ERROR_NO_DEVICE
                cc.no_device("ctypes", "cuInit: CUDA_ERROR_NO_DEVICE")
            raise cc.CheckFailed(f"{name} returned CUresult {rc}", failed_call=name, cuda_result=rc)

    call("cuInit", 0)
    call("cuDeviceGet", ctypes.byref(dev), 0)
    call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
    call("cuCtxSetCurrent", ctx)
    call("cuMemGetInfo_v2", ctypes.byref(free), ctypes.byref(total))
    data.update(total_bytes=total.value, free_bytes=free.value)
    call("cuMemAlloc_v2", ctypes.byref(ptr), ctypes.c_size_t(ALLOCATION))
    call("cuMemFree_v2", ctypes.c_uint64(ptr.value))
    call("cuDevicePrimaryCtxRelease_v2", dev)
    return total.value


def step_cuda_bindings(cap, data):
    driver = cc.import_cuda_driver()

    def call(name, *args):
        announce(name)
        result = getattr(driver, name)(*args)
        err, *values = result if isinstance(result, tuple) else (result,)
        data.setdefault("calls", []).append(name)
        if err != driver.CUresult.CUDA_SUCCESS:
            if name == "cuInit" and err == driver.CUresult.CUDA_ERROR_NO_DEVICE:
                cc.no_device("cuda-bindings", "cuInit: CUDA_ERROR_NO_DEVICE")
            raise cc.CheckFailed(f"{name} returned {err}", failed_call=name, cuda_result=str(err))
        return values[0] if len(values) == 1 else values

    call("cuInit", 0)
    dev = call("cuDeviceGet", 0)
    ctx = call("cuDevicePrimaryCtxRetain", dev)
    call("cuCtxSetCurrent", ctx)
    free, total = call("cuMemGetInfo")
    data.update(total_bytes=total, free_bytes=free)
    ptr = call("cuMemAlloc", ALLOCATION)
    call("cuMemFree", ptr)
    call("cuDevicePrimaryCtxRelease", dev)
    return total


def step_torch(cap, data):
    announce("import torch")
    torch = cc.import_module("torch")
    data["torch"] = torch.__version__
    announce("torch.cuda.is_available()")
    if not torch.cuda.is_available():
        cc.no_device("torch", "torch.cuda.is_available() is False")
    announce('torch.ones(1, device="cuda")')
    x = torch.ones(1, device="cuda")
    announce("sum().item()")
    s = x.sum().item()
    cc.expect(s == 1.0, f"torch.ones(1).sum() on the GPU is {s}, not 1.0")
    announce("torch.cuda.mem_get_info()")
    free, total = torch.cuda.mem_get_info()
    data.update(total_bytes=total, free_bytes=free)
    return total


STEPS = {"ctypes": step_ctypes, "cuda-bindings": step_cuda_bindings, "torch": step_torch}


def body(args, data):
    faulthandler.enable()  # a crash prints the Python stack it happened in, then ends as it would
    cap = cc.cap_from(args)
    data.update(step=args.step, cap_bytes=cap, pid=os.getpid())
    cc.log(f"python_preflight {args.step}: Python {sys.version.split()[0]} ({sys.executable}), "
           f"LD_PRELOAD={os.environ.get('LD_PRELOAD', '')!r}, cap {cc.fmt_bytes(cap)}")
    total = STEPS[args.step](cap, data)
    cc.expect(total == cap, f"{args.step}: the total told is {cc.fmt_bytes(total)}, not the cap {cc.fmt_bytes(cap)}")
    return f"{args.step}: a context, {ALLOCATION // cc.MiB} MiB, the cap {cc.fmt_bytes(cap)} told"


def main():
    p = cc.parser(__doc__.splitlines()[0])
    p.add_argument("--step", choices=sorted(STEPS), required=True)
    args = p.parse_args()
    cc.run(f"python-preflight-{args.step}", body, args)


if __name__ == "__main__":
    main()
