"""Shared plumbing for the framework checks in tests/gpu/frameworks/.

Every check script:
- reads the cap in bytes from SLICE_MEMORY_LIMIT when it is plain digits, else from --cap;
- prints human-readable lines as it goes, then exactly one last line `RESULT <json>` with
  {"check", "status": "pass"|"fail"|"skip", "why", ...measured numbers};
- exits 0 on pass, 1 on fail, 3 on skip;
- treats a missing library or no CUDA device as a FAIL, or a SKIP under --allow-missing; but a
  library that imports (or a GPU that nvidia-smi lists) without LD_PRELOAD and not under it is a
  FAIL even then: that is libslice's doing, not a missing piece;
- is bounded by a watchdog (--timeout, default 85 s) that prints a failing RESULT and exits.

This module imports no GPU library itself, so a script can set environment variables (allocator
settings, offline flags) before it imports one.
"""
import argparse
import faulthandler
import json
import os
import subprocess
import sys
import threading
import time
import traceback

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

EXIT_PASS, EXIT_FAIL, EXIT_SKIP = 0, 1, 3
DEFAULT_TIMEOUT_S = 85.0
# How far NVML's figure for this process may stand above the cap before a check calls the cap
# broken: the driver may grow its own share between libslice's reconciliations (docs/memory.md).
NVML_SLACK = 64 * MiB


class CheckFailed(Exception):
    """The check ran and found something wrong."""

    def __init__(self, why, **data):
        super().__init__(why)
        self.why = why
        self.data = data


class Missing(Exception):
    """A library or the CUDA device is not here: FAIL, or SKIP under --allow-missing."""

    def __init__(self, why, **data):
        super().__init__(why)
        self.why = why
        self.data = data


def log(*parts):
    print(*parts, flush=True)


def fmt_bytes(n):
    if n is None:
        return "n/a"
    n = int(n)
    sign = "-" if n < 0 else ""
    n = abs(n)
    if n >= GiB:
        return f"{sign}{n / GiB:.2f} GiB ({sign}{n} B)"
    if n >= MiB:
        return f"{sign}{n / MiB:.1f} MiB ({sign}{n} B)"
    return f"{sign}{n} B"


def expect(condition, why, **data):
    """Raise CheckFailed(why) unless condition holds."""
    if not condition:
        raise CheckFailed(why, **data)


# ----------------------------------------------------------------------------------------------
# Environment: the cap, LD_PRELOAD, children without libslice.

def preloaded():
    return "libslice" in os.environ.get("LD_PRELOAD", "")


def env_without_preload():
    """This process's environment less LD_PRELOAD: what a program sees without libslice."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    return env


def parse_size(text):
    """Bytes from '1073741824', '4Gi', '512Mi', '4G' (10^9). None if not understood."""
    text = text.strip()
    units = {"": 1, "Ki": KiB, "Mi": MiB, "Gi": GiB, "Ti": 1 << 40,
             "K": 10**3, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
             "KiB": KiB, "MiB": MiB, "GiB": GiB}
    for unit in sorted(units, key=len, reverse=True):
        if unit and text.endswith(unit):
            number = text[: -len(unit)]
            break
    else:
        unit, number = "", text
    try:
        return int(float(number) * units[unit]) if "." in number else int(number) * units[unit]
    except ValueError:
        return None


def cap_from(args, required=True):
    """The cap in bytes: SLICE_MEMORY_LIMIT when plain digits (the orchestrator passes bytes), else
    --cap. None (or CheckFailed when required) when neither gives one."""
    env = os.environ.get("SLICE_MEMORY_LIMIT", "").strip()
    arg = getattr(args, "cap", None)
    if env.isdigit():
        cap = int(env)
        if arg is not None and parse_size(str(arg)) != cap:
            log(f"note: --cap {arg} differs from SLICE_MEMORY_LIMIT={env}; using SLICE_MEMORY_LIMIT")
        return cap
    if arg is not None:
        cap = parse_size(str(arg))
        if cap is None or cap <= 0:
            raise CheckFailed(f"--cap {arg!r} is not a size in bytes")
        return cap
    if required:
        raise CheckFailed(
            f"no cap: SLICE_MEMORY_LIMIT={env!r} is not plain bytes and no --cap was given")
    return None


def gpu_listed_without_preload():
    """(True/False/None, text): does `nvidia-smi -L`, run without LD_PRELOAD, list a GPU?"""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], env=env_without_preload(), capture_output=True,
                             text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"nvidia-smi -L could not run: {e}"
    listed = [line for line in out.stdout.splitlines() if line.startswith("GPU ")]
    return bool(listed), (listed[0] if listed else (out.stderr or out.stdout).strip()[:200])


def no_device(library, detail):
    """Raise for "this library sees no CUDA device": a FAIL when a GPU is listed without
    libslice (libslice hid it), else Missing."""
    listed, text = gpu_listed_without_preload()
    if listed:
        raise CheckFailed(f"{library} sees no CUDA device under libslice ({detail}), "
                          f"but nvidia-smi without LD_PRELOAD lists one: {text}")
    raise Missing(f"no CUDA device: {library}: {detail}; nvidia-smi: {text}")


def import_module(name):
    """Import a library. When it fails, tell "not installed" (Missing) from "imports without
    libslice but not under it" (CheckFailed) with a child python without LD_PRELOAD."""
    import importlib
    try:
        return importlib.import_module(name)
    except ImportError as e:
        first = f"import {name} failed: {type(e).__name__}: {e}"
        log(first)
        if preloaded():
            try:
                child = subprocess.run([sys.executable, "-c", f"import {name}"],
                                       env=env_without_preload(), capture_output=True, text=True,
                                       timeout=60)
                if child.returncode == 0:
                    raise CheckFailed(f"{first}; the same import succeeds without LD_PRELOAD")
            except (OSError, subprocess.SubprocessError) as e2:
                log(f"could not retry the import without LD_PRELOAD: {e2}")
        raise Missing(first, missing=name)


def uuid_text(raw):
    """'GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx' from CUuuid.bytes (bytes, str or a sequence)."""
    def byte(x):
        if isinstance(x, (bytes, bytearray)):
            return x[0] if x else 0
        if isinstance(x, str):
            return ord(x) & 0xFF if x else 0
        return int(x) & 0xFF
    if isinstance(raw, str):
        raw = raw.encode("latin-1")
    raw = bytes(byte(b) for b in raw)[:16]
    h = raw.hex()
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def import_cuda_driver():
    """cuda-bindings' driver module (`from cuda.bindings import driver`, or `from cuda import cuda`
    in older cuda-python); Missing (or CheckFailed) when neither imports."""
    try:
        from cuda.bindings import driver
        return driver
    except ImportError:
        pass
    try:
        from cuda import cuda as driver
        return driver
    except ImportError:
        pass
    return import_module("cuda.bindings.driver")


# ----------------------------------------------------------------------------------------------
# Memory truth: NVML's per-process figure.

_nvml = {"module": None, "error": None}


def _nvml_module():
    if _nvml["module"] is None and _nvml["error"] is None:
        try:
            import pynvml
            pynvml.nvmlInit()
            _nvml["module"] = pynvml
        except Exception as e:  # ImportError or an NVMLError
            _nvml["error"] = f"{type(e).__name__}: {e}"
    return _nvml["module"]


def nvml_error():
    return _nvml["error"]


def process_gpu_bytes(pid=None):
    """This process's device memory by NVML's account (usedGpuMemory, summed over the GPUs that
    list it), or None when NVML does not list the PID (a PID namespace), does not give the figure,
    or cannot be loaded. Under libslice NVML lists only the tenant's processes, this one among
    them."""
    nv = _nvml_module()
    if nv is None:
        return None
    pid = os.getpid() if pid is None else pid
    found, total = False, 0
    try:
        for i in range(nv.nvmlDeviceGetCount()):
            handle = nv.nvmlDeviceGetHandleByIndex(i)
            for p in nv.nvmlDeviceGetComputeRunningProcesses(handle):
                if p.pid == pid:
                    used = p.usedGpuMemory
                    if used is None:
                        return None  # listed, but the figure is not available
                    found, total = True, total + int(used)
    except Exception as e:
        _nvml["error"] = f"{type(e).__name__}: {e}"
        return None
    return total if found else None


def truth(label):
    """process_gpu_bytes() with one printed line; None means "context not measurable"."""
    used = process_gpu_bytes()
    if used is None:
        why = nvml_error() or "NVML does not list this PID"
        log(f"NVML truth {label}: context not measurable ({why})")
    else:
        log(f"NVML truth {label}: this process holds {fmt_bytes(used)}")
    return used


def check_truth_under_cap(used, cap, label):
    """With NVML's figure: the process holds no more than the cap (plus NVML_SLACK)."""
    if used is None:
        return
    expect(used <= cap + NVML_SLACK,
           f"NVML says this process holds {fmt_bytes(used)} {label}, past the cap {fmt_bytes(cap)} "
           f"by more than {NVML_SLACK // MiB} MiB", nvml_over_cap_bytes=used - cap)


# ----------------------------------------------------------------------------------------------
# Filling up to the cap.

BLOCK = 256 * MiB


def memory_at_start(what, free0, total, cap, data, device_name=None):
    """The framework's own (free, total) before anything is allocated, checked against the cap: total
    is the cap and free within it. What the context took (cap - free) and NVML's figure go into data."""
    context = cap - free0
    data.update(total_bytes=total, free_bytes_at_start=free0, context_bytes=context)
    log(f"{device_name + ': ' if device_name else ''}{what} free {fmt_bytes(free0)}, total {fmt_bytes(total)}; "
        f"cap {fmt_bytes(cap)}; context (cap - free) {fmt_bytes(context)}")
    data["nvml_used_at_start"] = truth("at start")
    data["context_measurable"] = data["nvml_used_at_start"] is not None
    expect(total == cap, f"{what} total {total} is not the cap {cap}")
    expect(free0 <= cap, f"{what} free {free0} is more than the cap {cap}")
    return context


def fill_until_refused(alloc, is_oom, cap, block=BLOCK, label="block"):
    """Call alloc(block) until is_oom(exception) says the allocation was refused. Returns (blocks,
    the refusal). Bounded: never asks for more than the cap plus 4 blocks in all, so a cap that does
    not hold costs at most that much of the card, and is a CheckFailed."""
    blocks = []
    limit = cap // block + 4
    started = time.monotonic()
    while len(blocks) < limit:
        try:
            blocks.append(alloc(block))
        except Exception as e:
            if is_oom(e):
                log(f"refused after {len(blocks)} {label}s of {block // MiB} MiB "
                    f"({time.monotonic() - started:.2f} s): {type(e).__name__}: "
                    f"{str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}")
                return blocks, e
            raise
    n = len(blocks)
    del blocks
    raise CheckFailed(f"allocated {n} {label}s of {block // MiB} MiB ({fmt_bytes(n * block)}) "
                      f"without a refusal: the cap {fmt_bytes(cap)} did not hold", blocks=n)


def check_refusal_point(n, block, cap, context_bytes, data):
    """The refusal came at the cap: n blocks fit under it, and the next one (with one block of
    slack for the framework's own allocations) would not have fitted beside the context."""
    data.update(blocks=n, block_bytes=block, allocated_bytes=n * block)
    expect(n * block <= cap, f"{n} blocks of {block // MiB} MiB = {fmt_bytes(n * block)} passed "
           f"the cap {fmt_bytes(cap)}")
    expect((n + 2) * block > cap - context_bytes,
           f"refused early: only {n} blocks of {block // MiB} MiB fitted, though the cap "
           f"{fmt_bytes(cap)} less the context {fmt_bytes(context_bytes)} leaves room for "
           f"{(cap - context_bytes) // block}")


# ----------------------------------------------------------------------------------------------
# Running a check: arguments, watchdog, the RESULT line.

def parser(description):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--cap", help="cap in bytes (used when SLICE_MEMORY_LIMIT is not plain digits)")
    p.add_argument("--allow-missing", action="store_true",
                   help="a missing library or CUDA device is a SKIP (exit 3) instead of a FAIL")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help=f"watchdog, seconds (default {DEFAULT_TIMEOUT_S:g})")
    return p


_emit_lock = threading.Lock()
_emitted = {"done": False, "code": None}


def _clean(value):
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return str(value)


def emit(name, status, why, data):
    """Print the one RESULT line (once) and return the exit code."""
    code = {"pass": EXIT_PASS, "fail": EXIT_FAIL, "skip": EXIT_SKIP}[status]
    with _emit_lock:
        if _emitted["done"]:
            return _emitted["code"]
        record = {"check": name, "status": status, "why": why}
        for k, v in data.items():
            if k not in record:
                record[k] = _clean(v)
        sys.stdout.flush()
        sys.stderr.flush()
        print("RESULT " + json.dumps(record, sort_keys=False, default=str), flush=True)
        _emitted["done"], _emitted["code"] = True, code
        return code


def _watchdog(name, seconds, data):
    time.sleep(seconds)
    if _emitted["done"]:
        log(f"watchdog: {name} printed its RESULT but had not exited {seconds:.0f} s after start "
            "(teardown hung); exiting")
        os._exit(_emitted["code"])
    log(f"watchdog: {name} still running after {seconds:.0f} s; stacks follow")
    try:
        faulthandler.dump_traceback(file=sys.stdout, all_threads=True)
    except Exception:
        pass
    data = dict(data)
    data["timed_out"] = True
    os._exit(emit(name, "fail", f"timed out after {seconds:.0f} s (watchdog)", data))


def run(name, body, args, data=None):
    """Run body(args, data) and exit with the RESULT. body fills `data` with measured numbers as it
    goes (so a failure reports what was measured before it) and returns a short "why" for a pass.
    """
    data = {} if data is None else data
    data.setdefault("preloaded", preloaded())
    timeout = float(getattr(args, "timeout", DEFAULT_TIMEOUT_S) or DEFAULT_TIMEOUT_S)
    threading.Thread(target=_watchdog, args=(name, timeout, data), daemon=True).start()
    # Backstop in C, should the interpreter be wedged so that the watchdog thread cannot run.
    faulthandler.dump_traceback_later(timeout + 15, exit=True)
    started = time.monotonic()
    allow_missing = bool(getattr(args, "allow_missing", False))
    try:
        why = body(args, data) or "ok"
        status = "pass"
    except Missing as e:
        data.update(e.data)
        status, why = ("skip" if allow_missing else "fail"), e.why
    except CheckFailed as e:
        data.update(e.data)
        status, why = "fail", e.why
    except ImportError as e:  # an import the script did not route through import_module()
        traceback.print_exc()
        status = "skip" if allow_missing else "fail"
        why = f"missing library: {type(e).__name__}: {e}"
    except Exception as e:
        traceback.print_exc()
        status, why = "fail", f"unexpected {type(e).__name__}: {e}"
    except KeyboardInterrupt:
        status, why = "fail", "interrupted"
    if status == "fail" and not data.get("preloaded"):
        why += " (note: LD_PRELOAD does not name libslice)"
    data["elapsed_s"] = time.monotonic() - started
    code = emit(name, status, why.replace("\n", " ")[:1000], data)
    sys.exit(code)
