"""libslice leaves no trace in the process it lives in (issues 22 and 25): tests/shim/process_trace.cpp
writes down what a CUDA program can observe of itself at each step of its life; this runs it on the
simulated GPU without libslice and with it (a 256 MiB cap), and compares. Every difference must be
one of those listed here, with its reason; some things must hold whatever the comparison says (one
C library, the program's pthread keys untouched, nothing inherited by a child, forks that never hang).

  process_trace_test.py PROCESS_TRACE LIBSLICE DRIVER_DIR [CAP LARGE_MIB]

DRIVER_DIR goes first on LD_LIBRARY_PATH: the simulated GPU's folder here; on a real GPU
(tests/gpu/run.sh) "", the path as the environment has it, with a cap that fits a real context (CAP,
default 256Mi) and a request past it (LARGE_MIB, default 512).

What libslice may add is exact, not "anything while NVML is there": libslice.so itself; from the
first context, what one start of NVML brings into a process (learned from a process of its own that
starts NVML: `process_trace --nvml-footprint`), since libslice measures contexts through NVML; from
the first launch, its watcher thread; descriptors of its own only under the coordinator's folder.

With PROCESS_TRACE_MUTANT_LIB (tests/shim/trace_mutant.cpp) set, the trace is tested too: that
library, preloaded beside libslice, does one forbidden thing per run (a descriptor, five close-on-exec
descriptors, a key, a thread, a second C library, a signal disposition, errno changed late), and
each must fail the comparison."""
import collections
import os
import subprocess
import sys

probe, libslice, driver_dir = sys.argv[1:4]
cap = sys.argv[4] if len(sys.argv) > 4 else "256Mi"
large_mib = sys.argv[5] if len(sys.argv) > 5 else "512"
mutant_lib = os.environ.get("PROCESS_TRACE_MUTANT_LIB", "")
coordinator = os.environ.get("SLICE_COORDINATOR_DIR", "/dev/shm/libslice")
STEPS = ["start", "cuInit", "context", "allocation", "refusal", "reconciliation", "launch", "nvml", "late", "end"]
MUTANTS = ["descriptor", "cloexec-descriptors", "key", "thread", "libc", "signal", "late-errno"]
failures = []


def environment(preload, mutant=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLICE_") or k in ("SLICE_COORDINATOR_DIR",)}
    if driver_dir:
        env["LD_LIBRARY_PATH"] = driver_dir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    env["PROCESS_TRACE_LARGE_MIB"] = large_mib
    env.pop("LD_PRELOAD", None)
    env.pop("PROCESS_TRACE_MUTANT", None)
    if preload:
        env.update(LD_PRELOAD=libslice, SLICE_MEMORY_LIMIT=cap, SLICE_TENANT="trace")
    if mutant:
        env.update(LD_PRELOAD=mutant_lib + ":" + libslice, PROCESS_TRACE_MUTANT=mutant)
    return env


def run(preload, mutant=None, args=()):
    label = f"mutant {mutant}" if mutant else ("with" if preload else "without") + " libslice"
    out = subprocess.run([probe, *args], env=environment(preload, mutant), capture_output=True, text=True, timeout=180)
    if out.returncode != 0 and not mutant:
        failures.append(f"process_trace {' '.join(args)} {label} exited {out.returncode}: {out.stderr.strip()}")
    seen = {}
    for row in out.stdout.splitlines():
        step, what, value = (row.split("\t") + ["", ""])[:3]
        seen[(step, what)] = value
    return seen, out.stderr


def words(value):
    return collections.Counter((value or "").split())


def thread_names(value):
    return collections.Counter((value or ":").split(":", 1)[1].split())


def footprint():
    """What one start of NVML adds to a process that had none: objects, keys, threads, descriptors."""
    seen, _ = run(False, args=("--nvml-footprint",))
    return {
        "keys": int(seen.get(("footprint", "keys"), "0")),
        "threads": thread_names(seen.get(("footprint", "threads"))) - thread_names(seen.get(("footprint", "threads before"))),
        "descriptors": words(seen.get(("footprint", "descriptors"))) - words(seen.get(("footprint", "descriptors before"))),
    }


def objects(seen, step):
    return set(seen.get((step, "objects"), "").split())


def compare(without, with_, nvml):
    """The differences libslice must not make, and what must hold whatever the comparison says."""
    found = []

    def check(condition, message):
        if not condition:
            found.append(message)

    for step in STEPS:
        check(with_.get((step, "libc copies")) == "1",
              f"{step}: {with_.get((step, 'libc copies'))} copies of libc.so.6 in the process (a second C library)")
        check(with_.get((step, "key made first, never set")) == "0x0",
              f"{step}: a pthread key of the program's that it never set reads {with_.get((step, 'key made first, never set'))}")
        check(with_.get((step, "key made first, set")) == "0x5eed",
              f"{step}: a pthread key of the program's reads {with_.get((step, 'key made first, set'))}, not what it stored")
    check(with_.get(("refusal", "result of cuMemAlloc_v2")) == "2", "the request past the cap was not refused")
    check(with_.get(("late", "result of cuMemAlloc_v2 past the cap")) == "2", "the late request past the cap was not refused")
    check(without.get(("refusal", "result of cuMemAlloc_v2")) == "0", "without libslice the large request failed")

    def after(step, first):
        return step in STEPS and STEPS.index(step) >= STEPS.index(first)

    # The documented differences (docs/ARCHITECTURE.md, "What libslice leaves in a process"), each
    # with the rows it explains.
    def explained(step, what, a, b):
        if what == "objects":
            extra, missing = objects(with_, step) - objects(without, step), objects(without, step) - objects(with_, step)
            allowed = {"libslice.so", os.path.basename(mutant_lib)}
            if after(step, "context"):
                allowed.add("libnvidia-ml.so.1")  # libslice measures each context's memory through NVML
            return not missing and extra <= allowed
        if what == "next key":
            # The keys one start of NVML makes, from the first context (libslice makes none itself).
            added = int(b) - int(a)
            if not after(step, "context"):
                return added == 0
            nvml_absent = "libnvidia-ml.so.1" not in objects(without, step)
            return added in (0, nvml["keys"]) if nvml_absent else 0 <= added <= nvml["keys"]
        if what == "descriptors":
            # libslice's own (the coordinator's folder and its files, close-on-exec: checked at exec;
            # the folder itself while a look at it is under way on the watcher's thread) and, from
            # the first context, those of one start of NVML; nothing of the program's missing.
            extra, missing = words(b) - words(a), words(a) - words(b)
            if after(step, "context"):
                extra -= nvml["descriptors"]
            return not missing and all(path == coordinator or path.startswith(coordinator + "/") for path in extra)
        if what == "environment":
            # SLICE_TENANT is exported so that children join the tenant (the contract); the preload and
            # the cap are this test's own.
            return set(a.split()) ^ set(b.split()) <= {"SLICE_TENANT", "LD_PRELOAD", "SLICE_MEMORY_LIMIT"}
        if what == "threads":
            # libslice's compute watcher, named, from the first launch on (required), and from the
            # first context the threads one start of NVML brings.
            extra, missing = thread_names(b) - thread_names(a), thread_names(a) - thread_names(b)
            if missing:
                return False
            if after(step, "launch"):
                if extra["slice-watcher"] != 1:
                    return False
                extra["slice-watcher"] = 0
            if after(step, "context"):
                extra -= nvml["threads"]
            return not +extra
        if what in ("result of cuMemAlloc_v2", "result of cuMemAlloc_v2 past the cap") and step in ("refusal", "late"):
            return True  # the cap
        return False

    unexplained = []
    for key in sorted(set(without) | set(with_)):
        a, b = without.get(key), with_.get(key)
        if a == b:
            continue
        if not explained(key[0], key[1], a or "", b or ""):
            unexplained.append(f"{key[0]} / {key[1]}:\n    without libslice: {a}\n    with libslice:    {b}")
    if unexplained:
        found.append("differences that libslice must not make:\n  " + "\n  ".join(unexplained))

    # Things the comparison would not see if both sides were wrong.
    check(with_.get(("exec", "inherited descriptors")) == without.get(("exec", "inherited descriptors")),
          "a child program inherits a descriptor of libslice's")
    check(with_.get(("fork", "child that exits")) == "exit 0", "a child forked after CUDA use did not exit cleanly")
    check(with_.get(("fork", "child that calls the driver")) == "exit 0",
          "a child that calls the driver did not exit cleanly")
    busy = with_.get(("fork", "children forked while a thread launches"), "")
    check(busy.startswith("100 of 100 "), f"children forked while a thread launched: {busy or 'none'}")
    check(with_.get(("faults", "handler installed before CUDA ran")) == "1", "the program's own SIGSEGV handler did not run")
    check(with_.get(("faults", "handler installed after CUDA ran")) == "1", "the program's second SIGSEGV handler did not run")
    check(" slice-watcher" in with_.get(("launch", "threads"), ""), "libslice's watcher thread is not named")
    return found


nvml = footprint()
without, _ = run(False)
with_, stderr = run(True)
check_failures = compare(without, with_, nvml)
failures += check_failures
if ("launch", "threads") not in without:
    failures.append("the probe wrote nothing at its launch step")
if "100 of 100 " not in without.get(("fork", "children forked while a thread launches"), ""):
    failures.append("without libslice, children forked while a thread launched did not all exit cleanly: the probe is wrong")

caught = []
if mutant_lib:
    for kind in MUTANTS:
        mutated, _ = run(True, mutant=kind)
        if compare(without, mutated, nvml):
            caught.append(kind)
        else:
            failures.append(f"the trace did not notice a mutant preload that adds: {kind}")

if failures:
    print("FAIL:\n" + "\n".join(failures))
    if stderr.strip():
        print("standard error with libslice:\n" + stderr)
    sys.exit(1)
print(f"ok: {len(set(without) | set(with_))} observations at {len(STEPS)} steps and fork, exec and faults; "
      f"differences only where explained (NVML's start brings {nvml['keys']} keys, threads "
      f"{sorted(nvml['threads'].elements())}, {sum(nvml['descriptors'].values())} descriptors)"
      + (f"; mutants caught: {', '.join(caught)}" if caught else ""))
