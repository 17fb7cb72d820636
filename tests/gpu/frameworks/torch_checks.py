"""PyTorch under libslice on a real GPU.

    python3 tests/gpu/frameworks/torch_checks.py --mode caching|expandable|async|graph [--cap BYTES]
        [--allow-missing] [--timeout S] [--replays N] [--overlap-captures]

caching / expandable / async: the same memory check under PyTorch's three allocators (the native
caching allocator; the same with expandable_segments:True, which maps memory with cuMemCreate; and
backend:cudaMallocAsync, a stream-ordered pool). torch.cuda.mem_get_info() shows the cap; 256 MiB
tensors are refused with torch.cuda.OutOfMemoryError at the cap; after del + empty_cache the memory
comes back, 1 GiB can be allocated again and kernels (a fill, a sum, a matmul) run. The allocator
setting is put in the environment before torch is imported (PyTorch reads it when it loads).

graph: two Python threads, each with its own small model (Linear layers) and torch.cuda.Stream, warm
up together, capture a CUDA graph each with torch.cuda.graph(capture_error_mode="thread_local"), and
replay it N times (default 50); the replays must equal an eager run. Meant to run beside a busy
neighbour tenant with a compute share set (libslice gates graph launches and keeps out of captures).

Why the two captures are serialised by default: torch.cuda.graph.__enter__ calls
torch.cuda.synchronize() (a device-wide synchronisation) and empty_cache(). A device-wide
synchronisation while another thread's capture is in progress invalidates that capture whatever its
mode, and PyTorch documents one capture at a time per process. So each thread takes a lock around its
`with torch.cuda.graph(...)` block; "thread_local" is still what lets the OTHER thread keep working
(eager kernels, allocations, graph replays) while a capture is in progress, so the first thread's
replays run while the second thread captures. --overlap-captures instead makes the two captures
truly concurrent, with CUDAGraph.capture_begin/capture_end (no synchronize inside) and a barrier
that both threads reach while capturing; PyTorch supports that less well, so a failure there may be
PyTorch's: compare with the default mode.
"""
import argparse
import os
import sys
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_common as cc  # noqa: E402

ALLOC_CONF = {
    "caching": None,  # PyTorch's defaults: the native caching allocator
    "expandable": "expandable_segments:True",
    "async": "backend:cudaMallocAsync",
}
ALLOC_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")  # the older and the newer name


def set_allocator(mode, data):
    """Before torch is imported: the allocator settings for this mode, under both names."""
    if "torch" in sys.modules:
        raise cc.CheckFailed("internal: torch was imported before the allocator was configured")
    conf = ALLOC_CONF[mode]
    before = {v: os.environ.get(v) for v in ALLOC_VARS if os.environ.get(v) is not None}
    for var in ALLOC_VARS:
        if conf is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = conf
    data["alloc_conf"] = conf or "(default)"
    if before:
        data["alloc_conf_replaced"] = before
    cc.log(f"allocator settings: {conf or 'PyTorch defaults'}"
           + (f" (replacing {before})" if before else ""))


def import_torch():
    torch = cc.import_module("torch")
    cc.log(f"torch {torch.__version__}, CUDA {torch.version.cuda}")
    if not torch.cuda.is_available():
        cc.no_device("torch", "torch.cuda.is_available() is False")
    return torch


# ----------------------------------------------------------------------------------------------

def reserved(torch):
    """What PyTorch's allocator holds from the driver (None where the backend does not say)."""
    try:
        return int(torch.cuda.memory_reserved())
    except Exception:
        return None


def memory_mode(torch, mode, cap, data):
    backend = torch.cuda.get_allocator_backend()
    data["allocator_backend"] = backend
    want = "cudaMallocAsync" if mode == "async" else "native"
    cc.expect(backend == want, f"allocator backend is {backend!r}, wanted {want!r} "
              f"(PYTORCH_CUDA_ALLOC_CONF={os.environ.get('PYTORCH_CUDA_ALLOC_CONF')!r})")

    free0, total = torch.cuda.mem_get_info()
    data["cap_bytes"] = cap
    context = cc.memory_at_start("mem_get_info", free0, total, cap, data, torch.cuda.get_device_name(0))

    blocks, refusal = cc.fill_until_refused(
        lambda n: torch.empty(n, dtype=torch.uint8, device="cuda"),
        lambda e: isinstance(e, torch.cuda.OutOfMemoryError), cap, label="tensor")
    n = len(blocks)
    data["refusal"] = type(refusal).__name__
    del refusal  # its traceback holds frames; let go of it before freeing
    free_refused = torch.cuda.mem_get_info()[0]
    data.update(free_bytes_at_refusal=free_refused, reserved_bytes_at_refusal=reserved(torch))
    cc.log(f"at the refusal: mem_get_info free {cc.fmt_bytes(free_refused)}, "
           f"torch reserved {cc.fmt_bytes(data['reserved_bytes_at_refusal'])}")
    peak = cc.truth("at the refusal")
    data["nvml_used_at_refusal"] = peak
    cc.check_refusal_point(n, cc.BLOCK, cap, context, data)
    cc.check_truth_under_cap(peak, cap, "at the refusal")

    # Recovery: everything back, then 1 GiB again, and kernels (never with less than 512 MiB free:
    # a kernel at the very edge of the cap may need a workspace that is not there, a false failure).
    blocks.clear()
    del blocks
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    free_back = torch.cuda.mem_get_info()[0]
    data.update(free_bytes_after_free=free_back, reserved_bytes_after_free=reserved(torch))
    cc.log(f"after del + empty_cache: mem_get_info free {cc.fmt_bytes(free_back)}")
    data["nvml_used_after_free"] = cc.truth("after del + empty_cache")
    cc.expect(free_back >= free0 - 256 * cc.MiB,
              f"memory did not come back: free {cc.fmt_bytes(free_back)} after empty_cache, "
              f"{cc.fmt_bytes(free0)} at start")

    size = min(cc.GiB, free_back - 512 * cc.MiB)
    cc.expect(size >= 256 * cc.MiB, f"only {cc.fmt_bytes(free_back)} free after recovery")
    big = torch.empty(size, dtype=torch.uint8, device="cuda")
    data["recovery_bytes"] = size
    head = big[: 1 << 20]
    head.fill_(3)
    total_head = int(head.sum().item())
    cc.expect(total_head == 3 << 20, f"fill + sum on the recovered tensor gave {total_head}")
    a = torch.ones(256, 256, device="cuda")
    product = a @ a
    cc.expect(bool((product == 256).all().item()), "a 256x256 matmul of ones is not all 256")
    torch.cuda.synchronize()
    cc.log(f"recovery: allocated {cc.fmt_bytes(size)} again; fill, sum and matmul correct")
    del big, head, a, product
    return (f"{mode}: total == cap; refused after {n} x 256 MiB; memory came back; "
            f"{size // cc.MiB} MiB allocated again and kernels ran")


# ----------------------------------------------------------------------------------------------

def graph_mode(torch, args, data):
    replays = args.replays
    overlap = args.overlap_captures
    data.update(capture_error_mode="thread_local",
                captures="overlapped" if overlap else "serialized", replays=replays,
                compute_share=os.environ.get("SLICE_COMPUTE_SHARE"),
                tenant=os.environ.get("SLICE_TENANT"))
    free0, total = torch.cuda.mem_get_info()
    data.update(total_bytes=total, free_bytes_at_start=free0)
    cc.log(f"{torch.cuda.get_device_name(0)}: mem_get_info free {cc.fmt_bytes(free0)}, "
           f"total {cc.fmt_bytes(total)}; captures {data['captures']}, capture_error_mode thread_local")

    dev = torch.device("cuda", 0)
    torch.manual_seed(1234)

    def make_model():
        return torch.nn.Sequential(
            torch.nn.Linear(512, 1024), torch.nn.GELU(),
            torch.nn.Linear(1024, 1024), torch.nn.GELU(),
            torch.nn.Linear(1024, 256)).to(dev).eval()

    models = [make_model(), make_model()]
    static_in = [torch.randn(64, 512, device=dev) for _ in range(2)]
    fresh_in = [torch.randn(64, 512, device=dev) for _ in range(2)]
    torch.cuda.synchronize()

    lock = threading.Lock()
    barrier = threading.Barrier(2, timeout=args.barrier_timeout)
    origin = time.monotonic()
    reports = [{"thread": i, "stage": "not started"} for i in range(2)]

    def now():
        return round(time.monotonic() - origin, 4)

    def worker(i):
        r = reports[i]
        try:
            torch.cuda.set_device(0)
            stream = torch.cuda.Stream()
            model, x, x2 = models[i], static_in[i], fresh_in[i]
            graph = torch.cuda.CUDAGraph()
            with torch.no_grad():
                r["stage"] = "warm-up"
                with torch.cuda.stream(stream):
                    for _ in range(3):
                        model(x)
                stream.synchronize()
                r["stage"] = "waiting for the other thread's warm-up"
                barrier.wait()
                if overlap:
                    r["stage"] = "capture"
                    with torch.cuda.stream(stream):
                        r["capture_began_s"] = now()
                        graph.capture_begin(capture_error_mode="thread_local")
                        try:
                            out = model(x)
                            r["stage"] = "capture (waiting for the other thread to be capturing too)"
                            barrier.wait()
                        finally:
                            graph.capture_end()
                        r["capture_ended_s"] = now()
                else:
                    r["stage"] = "waiting for the capture lock"
                    with lock:
                        r["stage"] = "capture"
                        r["capture_began_s"] = now()
                        with torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
                            out = model(x)
                        r["capture_ended_s"] = now()
                r["captured"] = True
                r["stage"] = "replay"
                with torch.cuda.stream(stream):
                    x.copy_(x2)
                    r["replay_began_s"] = now()
                    for _ in range(replays):
                        graph.replay()
                    stream.synchronize()
                    r["replay_ended_s"] = now()
                    r["stage"] = "eager reference"
                    ref = model(x2)
                    r["max_abs_diff"] = float((out - ref).abs().max().item())
                    r["replays_match_eager"] = bool(torch.allclose(out, ref, rtol=1e-3, atol=1e-3))
                stream.synchronize()
                r["stage"] = "done"
        except BaseException as e:  # reported in the RESULT; the other thread must not wait for us
            r["error"] = f"{r['stage']}: {type(e).__name__}: {e}"
            traceback.print_exc()
            barrier.abort()

    threads = [threading.Thread(target=worker, args=(i,), name=f"graph-{i}", daemon=True)
               for i in range(2)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + args.thread_timeout
    for t in threads:
        t.join(timeout=max(0.1, deadline - time.monotonic()))
    data["threads"] = reports
    for r in reports:
        cc.log(f"thread {r['thread']}: " + ", ".join(f"{k}={v}" for k, v in r.items() if k != "thread"))
    stuck = [r for r, t in zip(reports, threads) if t.is_alive()]
    if stuck:
        raise cc.CheckFailed("thread(s) still running after "
                             f"{args.thread_timeout:.0f} s: " + "; ".join(
                                 f"thread {r['thread']} at {r['stage']}" for r in stuck))
    errors = [f"thread {r['thread']}: {r['error']}" for r in reports if "error" in r]
    data["captured"] = sum(1 for r in reports if r.get("captured"))
    cc.expect(not errors, "; ".join(errors))
    cc.expect(all(r.get("replays_match_eager") for r in reports),
              "graph replays differ from the eager run: max |diff| "
              + ", ".join(str(r.get("max_abs_diff")) for r in reports))
    # Did one thread's replays (serialised) or capture (overlapped) run during the other's capture?
    a, b = reports
    if overlap:
        concurrent = (a["capture_began_s"] < b["capture_ended_s"]
                      and b["capture_began_s"] < a["capture_ended_s"])
    else:
        first, second = sorted(reports, key=lambda r: r["capture_began_s"])
        concurrent = (first["replay_began_s"] < second["capture_ended_s"]
                      and second["capture_began_s"] < first["replay_ended_s"])
    data["work_during_other_capture"] = concurrent
    return (f"2 threads captured ({data['captures']}, thread_local) and replayed {replays} times "
            "each, equal to eager")


# ----------------------------------------------------------------------------------------------

def main():
    p = cc.parser(__doc__.split("\n\n")[0])
    p.add_argument("--mode", required=True, choices=["caching", "expandable", "async", "graph"])
    p.add_argument("--replays", type=int, default=50, help="graph: replays per graph (default 50)")
    p.add_argument("--overlap-captures", action="store_true",
                   help="graph: run the two captures at the same time (see the module docstring)")
    p.add_argument("--barrier-timeout", type=float, default=20.0, help=argparse.SUPPRESS)
    p.add_argument("--thread-timeout", type=float, default=60.0, help=argparse.SUPPRESS)
    args = p.parse_args()

    def body(args, data):
        data["mode"] = args.mode
        if args.mode == "graph":
            torch = import_torch()
            return graph_mode(torch, args, data)
        cap = cc.cap_from(args)
        set_allocator(args.mode, data)
        torch = import_torch()
        return memory_mode(torch, args.mode, cap, data)

    cc.run(f"torch-{args.mode}", body, args)


if __name__ == "__main__":
    main()
