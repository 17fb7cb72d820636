"""CuPy under libslice: memGetInfo shows the cap, its memory pool is refused at the cap, recovers.

    python3 tests/gpu/frameworks/cupy_check.py [--cap BYTES] [--allow-missing] [--timeout S]

cupy.cuda.runtime.memGetInfo() total == cap; 256 MiB arrays from the default memory pool until
cupy.cuda.memory.OutOfMemoryError, which must come at the cap (as in torch_checks.py --mode
caching); then del, free_all_blocks(), and 1 GiB is allocated again and a kernel runs.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_common as cc  # noqa: E402


def body(args, data):
    cap = cc.cap_from(args)
    data["cap_bytes"] = cap
    cp = cc.import_module("cupy")
    cc.log(f"cupy {cp.__version__}")
    try:
        count = cp.cuda.runtime.getDeviceCount()
    except Exception as e:  # cupy_backends.cuda.api.runtime.CUDARuntimeError
        cc.no_device("cupy", f"getDeviceCount: {type(e).__name__}: {e}")
    if count < 1:
        cc.no_device("cupy", "getDeviceCount() == 0")
    cp.cuda.Device(0).use()
    pool = cp.get_default_memory_pool()

    free0, total = cp.cuda.runtime.memGetInfo()
    context = cc.memory_at_start("memGetInfo", free0, total, cap, data)

    blocks, refusal = cc.fill_until_refused(
        lambda n: cp.empty(n, dtype=cp.uint8),
        lambda e: isinstance(e, cp.cuda.memory.OutOfMemoryError), cap, label="array")
    n = len(blocks)
    data["refusal"] = type(refusal).__name__
    del refusal
    data.update(free_bytes_at_refusal=cp.cuda.runtime.memGetInfo()[0], pool_total_bytes=pool.total_bytes())
    peak = cc.truth("at the refusal")
    data["nvml_used_at_refusal"] = peak
    cc.check_refusal_point(n, cc.BLOCK, cap, context, data)
    cc.check_truth_under_cap(peak, cap, "at the refusal")

    blocks.clear()
    del blocks
    pool.free_all_blocks()
    free_back = cp.cuda.runtime.memGetInfo()[0]
    data["free_bytes_after_free"] = free_back
    cc.log(f"after del + free_all_blocks: memGetInfo free {cc.fmt_bytes(free_back)}")
    data["nvml_used_after_free"] = cc.truth("after free_all_blocks")
    cc.expect(free_back >= free0 - 256 * cc.MiB,
              f"memory did not come back: free {cc.fmt_bytes(free_back)} after free_all_blocks, "
              f"{cc.fmt_bytes(free0)} at start")

    size = min(cc.GiB, free_back - 512 * cc.MiB)  # a kernel never runs at the edge of the cap
    cc.expect(size >= 256 * cc.MiB, f"only {cc.fmt_bytes(free_back)} free after recovery")
    big = cp.empty(size, dtype=cp.uint8)
    data["recovery_bytes"] = size
    head = big[: 1 << 20]
    head.fill(3)
    got = int(head.sum(dtype=cp.int64))
    cc.expect(got == 3 << 20, f"fill + sum on the recovered array gave {got}")
    x = cp.arange(1024, dtype=cp.float32)
    s = float((x * 2).sum())
    cc.expect(s == 1047552.0, f"sum(2 * arange(1024)) = {s}")
    cp.cuda.Device(0).synchronize()
    cc.log(f"recovery: allocated {cc.fmt_bytes(size)} again; kernels correct")
    del big, head, x
    pool.free_all_blocks()
    return f"total == cap; refused after {n} x 256 MiB; memory came back; kernels ran"


def main():
    args = cc.parser(__doc__.split("\n\n")[0]).parse_args()
    cc.run("cupy", body, args)


if __name__ == "__main__":
    main()
