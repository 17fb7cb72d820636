"""libslice leaves no trace in the process it lives in (issue 22): tests/shim/process_trace.cpp
writes down what a CUDA program can observe of itself at each step of its life; this runs it on the
simulated GPU without libslice and with it (a 256 MiB cap), and compares. Every difference must be
one of those listed here, with its reason; some things must hold whatever the comparison says (one
C library, the program's pthread keys untouched, nothing inherited by a child).

  process_trace_test.py PROCESS_TRACE LIBSLICE DRIVER_DIR [CAP LARGE_MIB]

DRIVER_DIR goes first on LD_LIBRARY_PATH: the simulated GPU's folder here; on a real GPU
(tests/gpu/run.sh) "", the path as the environment has it, with a cap that fits a real context (CAP, default 256Mi) and a request past it
(LARGE_MIB, default 512)."""
import os
import subprocess
import sys

probe, libslice, driver_dir = sys.argv[1:4]
cap = sys.argv[4] if len(sys.argv) > 4 else "256Mi"
large_mib = sys.argv[5] if len(sys.argv) > 5 else "512"
STEPS = ["start", "cuInit", "context", "allocation", "refusal", "reconciliation", "launch", "nvml", "end"]
failures = []


def run(preload):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLICE_") or k in ("SLICE_COORDINATOR_DIR",)}
    if driver_dir:
        env["LD_LIBRARY_PATH"] = driver_dir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    env["PROCESS_TRACE_LARGE_MIB"] = large_mib
    env.pop("LD_PRELOAD", None)
    if preload:
        env.update(LD_PRELOAD=libslice, SLICE_MEMORY_LIMIT=cap, SLICE_TENANT="trace")
    out = subprocess.run([probe], env=env, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        failures.append(f"process_trace {'with' if preload else 'without'} libslice exited {out.returncode}: "
                        f"{out.stderr.strip()}")
    seen = {}
    for row in out.stdout.splitlines():
        step, what, value = (row.split("\t") + ["", ""])[:3]
        seen[(step, what)] = value
    return seen, out.stderr


def check(condition, message):
    if not condition:
        failures.append(message)


without, _ = run(False)
with_, stderr = run(True)

# What must hold under libslice, whatever happens without it.
for step in STEPS:
    check(with_.get((step, "libc copies")) == "1",
          f"{step}: {with_.get((step, 'libc copies'))} copies of libc.so.6 in the process (a second C library)")
    check(with_.get((step, "key made first, never set")) == "0x0",
          f"{step}: a pthread key of the program's that it never set reads {with_.get((step, 'key made first, never set'))}")
    check(with_.get((step, "key made first, set")) == "0x5eed",
          f"{step}: a pthread key of the program's reads {with_.get((step, 'key made first, set'))}, not what it stored")
check(with_.get(("refusal", "result of cuMemAlloc_v2")) == "2", "the request past the cap was not refused")
check(without.get(("refusal", "result of cuMemAlloc_v2")) == "0", "without libslice the large request failed")


def objects(seen, step):
    return set(seen.get((step, "objects"), "").split())


def nvml_by_libslice(step):
    """NVML is in the process only because libslice measured a context through it."""
    return "libnvidia-ml.so.1" in objects(with_, step) - objects(without, step)


# The documented differences (docs/ARCHITECTURE.md, "What libslice leaves in a process"), each with
# the rows it explains: step -> what -> why.
def explained(step, what, a, b):
    if what == "objects":
        extra, missing = objects(with_, step) - objects(without, step), objects(without, step) - objects(with_, step)
        allowed = {"libslice.so"}
        if step not in ("start", "cuInit"):
            allowed.add("libnvidia-ml.so.1")  # libslice measures each context's memory through NVML
        return not missing and extra <= allowed
    if what == "next key":
        # Keys NVML made when libslice loaded it (libslice itself makes none): only while NVML is
        # in the process because of libslice.
        return nvml_by_libslice(step)
    if what == "descriptors":
        return True  # the coordinator's files; none inheritable (checked below)
    if what == "environment":
        # SLICE_TENANT is exported so that children join the tenant (the contract); the preload and
        # the cap are this test's own.
        return set(a.split()) ^ set(b.split()) <= {"SLICE_TENANT", "LD_PRELOAD", "SLICE_MEMORY_LIMIT"}
    if what == "threads":
        # libslice's compute watcher, named, from the first launch on; and on a real GPU the thread
        # NVML starts with itself, while NVML is there only because of libslice.
        names_with, names_without = b.split(":", 1)[1].split(), a.split(":", 1)[1].split()
        late = step in STEPS and STEPS.index(step) >= STEPS.index("launch")
        extra = list(names_with)
        for name in names_without:
            if name not in extra:
                return False
            extra.remove(name)
        if late:
            if "slice-watcher" not in extra:
                return False
            extra.remove("slice-watcher")
        return not extra or nvml_by_libslice(step)
    if step == "refusal" and what == "result of cuMemAlloc_v2":
        return True  # the cap
    return False


keys = sorted(set(without) | set(with_))
unexplained = []
for key in keys:
    a, b = without.get(key), with_.get(key)
    if a == b:
        continue
    if not explained(key[0], key[1], a, b):
        unexplained.append(f"{key[0]} / {key[1]}:\n    without libslice: {a}\n    with libslice:    {b}")
if unexplained:
    failures.append("differences that libslice must not make:\n  " + "\n  ".join(unexplained))

# Things the comparison would not see if both sides were wrong.
check(with_.get(("exec", "inherited descriptors")) == without.get(("exec", "inherited descriptors")),
      "a child program inherits a descriptor of libslice's")
check(with_.get(("fork", "child that exits")) == "exit 0", "a child forked after CUDA use did not exit cleanly")
check(with_.get(("fork", "child that calls the driver")) == "exit 0", "a child that calls the driver did not exit cleanly")
check(with_.get(("faults", "handler installed before CUDA ran")) == "1", "the program's own SIGSEGV handler did not run")
check(with_.get(("faults", "handler installed after CUDA ran")) == "1", "the program's second SIGSEGV handler did not run")
check(" slice-watcher" in with_.get(("launch", "threads"), ""), "libslice's watcher thread is not named")
check(("launch", "threads") in without, "the probe wrote nothing at its launch step")

if failures:
    print("FAIL:\n" + "\n".join(failures))
    if stderr.strip():
        print("standard error with libslice:\n" + stderr)
    sys.exit(1)
print(f"ok: {len(keys)} observations at {len(STEPS)} steps and fork, exec and faults; differences only where explained")
