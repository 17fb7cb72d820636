#!/usr/bin/env python3
"""A stand-in for every framework check of tests/gpu/frameworks/, for tests/gpu/run.sh --dry-run:
run.sh links each check's name to this file in a folder of its own and runs its GPU path on them.
It checks what the orchestrator must pass (a --timeout inside the check's limit, the tenant and its
cap in the environment), and prints the RESULT line the real check would. As transformers_shares.py
it follows the real ready-file and plan protocol, reporting token rates that follow its share; its
--make-plan and --judge are the real script's (FAKE_REAL_FRAMEWORKS names that folder).
FAKE_PYTHON_CRASH=STEP: as on the first real GPU, every check dies of SIGSEGV, and so does
python_preflight.py's step STEP (its others pass)."""
import json
import os
import resource
import runpy
import signal
import sys
import time

name = os.path.basename(sys.argv[0])
argv = sys.argv[1:]


def result(status, why, code, **data):
    print("RESULT " + json.dumps({"check": name, "status": status, "why": why, **data}), flush=True)
    sys.exit(code)


if name == "transformers_shares.py" and ("--make-plan" in argv or "--judge" in argv):
    real = os.path.join(os.environ["FAKE_REAL_FRAMEWORKS"], name)
    sys.argv = [real] + argv
    runpy.run_path(real, run_name="__main__")
    sys.exit(0)


def arg(flag):
    return argv[argv.index(flag) + 1] if flag in argv else None


timeout = arg("--timeout")
if timeout is None or not timeout.lstrip("-").isdigit() or not 0 < int(timeout) <= 600:
    result("fail", f"the orchestrator passed no usable --timeout ({timeout!r})", 1)
if not os.environ.get("SLICE_TENANT"):
    result("fail", "no SLICE_TENANT in the environment", 1)
if os.environ.get("FAKE_UNDER") != "1":
    result("fail", "not run under (the stand-in of) libslice", 1)
if name == "python_preflight.py" and not os.environ.get("SLICE_MEMORY_LIMIT", "").isdigit():
    result("fail", "the orchestrator set no cap in bytes (SLICE_MEMORY_LIMIT)", 1)

crash = os.environ.get("FAKE_PYTHON_CRASH")
if crash and (name != "python_preflight.py" or arg("--step") == crash):
    print(f"calling cuDevicePrimaryCtxRetain (stand-in: crashing, FAKE_PYTHON_CRASH={crash})", flush=True)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file left behind
    os.kill(os.getpid(), signal.SIGSEGV)

if name == "transformers_shares.py":
    ready, plan_file, who = arg("--ready-file"), arg("--plan-file"), arg("--name")
    share = float(os.environ.get("SLICE_COMPUTE_SHARE", "100")) / 100
    print("model: 302.0 M parameters (fake)", flush=True)
    tmp = f"{ready}.tmp"
    with open(tmp, "w") as f:
        json.dump({"name": who, "pid": os.getpid(), "call_s": 0.01, "tokens_per_call": 4096}, f)
    os.replace(tmp, ready)
    deadline = time.monotonic() + 60
    while not os.path.exists(plan_file):
        if time.monotonic() > deadline:
            result("fail", "no plan", 1)
        time.sleep(0.05)
    windows = json.load(open(plan_file))["windows"][who]
    data = {}
    for kind, start, end in windows:
        time.sleep(max(0.0, end - time.time()))
        data[f"{kind}_tokens_per_s"] = 1000.0 if kind == "solo" else 1000.0 * share
        print(f"{kind} window: {data[f'{kind}_tokens_per_s']:.0f} tokens/s (fake)", flush=True)
    result("pass", "fake rates", 0, **data)

result("pass", f"stand-in for {name} {' '.join(argv[:2])}", 0)
