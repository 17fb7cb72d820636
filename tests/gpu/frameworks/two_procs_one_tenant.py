"""Two processes of one tenant share its cap.

    python3 tests/gpu/frameworks/two_procs_one_tenant.py [--cap BYTES] [--backend auto|torch|cupy]
        [--allow-missing] [--timeout S]

The parent touches no GPU. It starts two children of itself with the same environment and the
same SLICE_TENANT (it sets one, two-procs-<pid>, when none is set, and SLICE_MEMORY_LIMIT to the
cap in bytes). Each uses PyTorch, or CuPy where torch cannot be imported (--backend auto).
- the holder allocates 0.6 x cap and holds it until the parent says so (on its stdin);
- the asker, started once the holder holds, sees the holder's memory in its own free figure
  (free <= cap - what the holder holds), asks for 0.6 x cap and must be refused with the framework's
  out-of-memory error, then asks for 0.2 x cap, which must succeed.
Each process's context overhead (cap - free at its start, less the holder's usage for the asker)
is reported. Where libslice charges contexts (NVML sees the PIDs), two contexts and 0.6 + 0.2 of the
cap may not fit under a small cap; the second request is then lowered to what the asker's free
figure allows (reported as second_request_lowered), and the cap should be 6 GiB or more for the
full 0.2.
"""
import argparse
import json
import os
import queue
import select
import subprocess
import sys
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_common as cc  # noqa: E402

ALIGN = 2 * cc.MiB
PROTO = "PROTO "


def aligned(n):
    return int(n) // ALIGN * ALIGN


# ----------------------------------------------------------------------------------------------
# Children.

class TorchBackend:
    name = "torch"

    def __init__(self):
        self.torch = cc.import_module("torch")
        if not self.torch.cuda.is_available():
            cc.no_device("torch", "torch.cuda.is_available() is False")

    def mem_info(self):
        return self.torch.cuda.mem_get_info()

    def alloc(self, n):
        return self.torch.empty(n, dtype=self.torch.uint8, device="cuda")

    def is_oom(self, e):
        return isinstance(e, self.torch.cuda.OutOfMemoryError)

    def sync(self):
        self.torch.cuda.synchronize()

    def release(self):
        self.sync()
        self.torch.cuda.empty_cache()


class CupyBackend:
    name = "cupy"

    def __init__(self):
        self.cp = cc.import_module("cupy")
        try:
            count = self.cp.cuda.runtime.getDeviceCount()
        except Exception as e:
            cc.no_device("cupy", f"{type(e).__name__}: {e}")
        if count < 1:
            cc.no_device("cupy", "getDeviceCount() == 0")
        self.cp.cuda.Device(0).use()

    def mem_info(self):
        return self.cp.cuda.runtime.memGetInfo()

    def alloc(self, n):
        return self.cp.empty(n, dtype=self.cp.uint8)

    def is_oom(self, e):
        return isinstance(e, self.cp.cuda.memory.OutOfMemoryError)

    def sync(self):
        self.cp.cuda.Device(0).synchronize()

    def release(self):
        self.sync()
        self.cp.get_default_memory_pool().free_all_blocks()


def make_backend(which):
    if which == "torch":
        return TorchBackend()
    if which == "cupy":
        return CupyBackend()
    try:
        return TorchBackend()
    except cc.Missing as e:
        cc.log(f"torch unusable ({e.why}); trying cupy")
        torch_why = e.why
    try:
        return CupyBackend()
    except cc.Missing as e:
        raise cc.Missing(f"neither torch nor cupy: {torch_why}; {e.why}")


def say(event, **fields):
    fields["event"] = event
    print(PROTO + json.dumps(fields, default=str), flush=True)


def holder(args, cap):
    backend = make_backend(args.backend)
    free0, total = backend.mem_info()
    size = aligned(args.hold_fraction * cap)
    block = backend.alloc(size)
    backend.sync()
    free1, _ = backend.mem_info()
    say("held", backend=backend.name, pid=os.getpid(), total=total, free_start=free0,
        context=cap - free0, held_bytes=size, free_after=free1,
        nvml_used=cc.process_gpu_bytes())
    # Hold until the parent writes a line or closes the pipe (it exits), or for at most 60 s.
    ready, _, _ = select.select([sys.stdin], [], [], args.hold_seconds)
    if ready:
        sys.stdin.readline()
    del block
    backend.release()
    say("released", free=backend.mem_info()[0])


def asker(args, cap):
    backend = make_backend(args.backend)
    free0, total = backend.mem_info()
    report = dict(backend=backend.name, pid=os.getpid(), total=total, free_start=free0,
                  nvml_used_at_start=cc.process_gpu_bytes())
    first = aligned(args.hold_fraction * cap)
    report["first_request"] = first
    try:
        got = backend.alloc(first)
        report["first_refused"] = False
        del got
        backend.release()
    except Exception as e:
        if not backend.is_oom(e):
            raise
        report["first_refused"] = True
        report["first_error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"
    free_now = backend.mem_info()[0]
    second = aligned(args.second_fraction * cap)
    room = aligned(free_now - 64 * cc.MiB)
    report.update(free_before_second=free_now, second_wanted=second)
    if second > room:
        report["second_request_lowered"] = True
        second = room
    report["second_request"] = second
    if second <= 0:
        report["second_ok"] = False
        report["second_error"] = f"no room: free {free_now}"
    else:
        try:
            got = backend.alloc(second)
            report["second_ok"] = True
            report["free_after_second"] = backend.mem_info()[0]
            report["nvml_used_after_second"] = cc.process_gpu_bytes()
            del got
        except Exception as e:
            if not backend.is_oom(e):
                raise
            report["second_ok"] = False
            report["second_error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300]}"
    backend.release()
    say("done", **report)


def child_main(args):
    cap = cc.cap_from(args)
    try:
        if args.role == "holder":
            holder(args, cap)
        else:
            asker(args, cap)
        return 0
    except cc.Missing as e:
        say("missing", why=e.why)
    except cc.CheckFailed as e:
        say("error", why=e.why)
    except Exception as e:
        traceback.print_exc()
        say("error", why=f"{type(e).__name__}: {e}")
    return 1


# ----------------------------------------------------------------------------------------------
# Parent.

class Child:
    def __init__(self, role, argv, env):
        self.role = role
        self.events = queue.Queue()
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                     text=True, bufsize=1)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            if line.startswith(PROTO):
                try:
                    self.events.put(json.loads(line[len(PROTO):]))
                    continue
                except ValueError:
                    pass
            print(f"[{self.role} {self.proc.pid}] {line}", flush=True)
        self.events.put({"event": "exited"})

    def wait_event(self, wanted, timeout):
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise cc.CheckFailed(f"the {self.role} did not report '{wanted}' within {timeout:.0f} s")
            try:
                ev = self.events.get(timeout=left)
            except queue.Empty:
                continue
            cc.log(f"{self.role}: {ev}")
            if ev["event"] == wanted:
                return ev
            if ev["event"] == "missing":
                raise cc.Missing(f"{self.role}: {ev['why']}")
            if ev["event"] == "error":
                raise cc.CheckFailed(f"{self.role}: {ev['why']}")
            if ev["event"] == "exited":
                self.proc.wait(timeout=5)
                raise cc.CheckFailed(f"the {self.role} exited (rc {self.proc.returncode}) "
                                     f"before reporting '{wanted}'")

    def stop(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


def parent(args, data):
    cap = cc.cap_from(args)
    env = dict(os.environ)
    env["SLICE_TENANT"] = env.get("SLICE_TENANT") or f"two-procs-{os.getpid()}"
    env["SLICE_MEMORY_LIMIT"] = str(cap)
    data.update(cap_bytes=cap, tenant=env["SLICE_TENANT"])
    cc.log(f"tenant {env['SLICE_TENANT']}, cap {cc.fmt_bytes(cap)}")
    me = [sys.executable, os.path.abspath(__file__), "--cap", str(cap),
          "--hold-fraction", str(args.hold_fraction), "--second-fraction", str(args.second_fraction)]
    children = []
    try:
        h = Child("holder", me + ["--role", "holder", "--backend", args.backend], env)
        children.append(h)
        held = h.wait_event("held", args.child_timeout)
        data.update(backend=held["backend"], holder_pid=held["pid"], holder_total=held["total"],
                    holder_context_bytes=held["context"], held_bytes=held["held_bytes"],
                    holder_nvml_used=held.get("nvml_used"))
        cc.expect(held["total"] == cap, f"the holder sees total {held['total']}, not the cap {cap}")

        a = Child("asker", me + ["--role", "asker", "--backend", held["backend"]], env)
        children.append(a)
        done = a.wait_event("done", args.child_timeout)
        asker_context = held["free_after"] - done["free_start"]
        data.update(asker_pid=done["pid"], asker_total=done["total"], asker_free_start=done["free_start"],
                    asker_context_bytes=asker_context, asker_nvml_used_at_start=done.get("nvml_used_at_start"),
                    first_request=done["first_request"], first_refused=done["first_refused"],
                    first_error=done.get("first_error"), second_request=done["second_request"],
                    second_wanted=done["second_wanted"],
                    second_request_lowered=bool(done.get("second_request_lowered")),
                    second_ok=done["second_ok"], second_error=done.get("second_error"))
        cc.log(f"context overhead: holder {cc.fmt_bytes(held['context'])}, asker about "
               f"{cc.fmt_bytes(asker_context)} (holder's free after its allocation less the asker's "
               "free at start)")

        h.proc.stdin.write("release\n")
        h.proc.stdin.flush()
        h.wait_event("released", 20)
    finally:
        for c in children:
            c.stop()

    cc.expect(done["total"] == cap, f"the asker sees total {done['total']}, not the cap {cap}")
    used_seen = cap - done["free_start"]
    cc.expect(used_seen >= held["held_bytes"],
              f"the asker does not see the holder's memory: its free {cc.fmt_bytes(done['free_start'])} "
              f"is more than cap - held = {cc.fmt_bytes(cap - held['held_bytes'])}")
    slack = held["held_bytes"] + 2 * max(0, held["context"]) + 256 * cc.MiB
    cc.expect(used_seen <= slack,
              f"the asker sees {cc.fmt_bytes(used_seen)} of the tenant used, more than the holder's "
              f"{cc.fmt_bytes(held['held_bytes'])} plus two contexts and 256 MiB ({cc.fmt_bytes(slack)})")
    cc.expect(done["first_refused"], f"the asker's {cc.fmt_bytes(done['first_request'])} was not refused "
              "although the holder holds 0.6 of the shared cap")
    cc.expect(done["second_ok"], f"the asker's second request of {cc.fmt_bytes(done['second_request'])} "
              f"failed: {done.get('second_error')}")
    lowered = " (lowered to fit)" if data["second_request_lowered"] else ""
    return (f"{data['backend']}: the second process saw the first's 0.6 x cap, was refused 0.6 x cap, "
            f"and got {done['second_request'] / cap:.2f} x cap{lowered}")


def main():
    p = cc.parser(__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=["auto", "torch", "cupy"], default="auto")
    p.add_argument("--hold-fraction", type=float, default=0.6)
    p.add_argument("--second-fraction", type=float, default=0.2)
    p.add_argument("--child-timeout", type=float, default=40.0, help="seconds for each child to report")
    p.add_argument("--role", choices=["parent", "holder", "asker"], default="parent",
                   help="internal: the children run the same script")
    p.add_argument("--hold-seconds", type=float, default=60.0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.role != "parent":
        sys.exit(child_main(args))
    cc.run("two-procs-one-tenant", parent, args)


if __name__ == "__main__":
    main()
