"""Python programs that create a CUDA context, as plain ctypes and through NVIDIA's cuda-bindings,
under LD_PRELOAD=libslice.so on the simulated GPU (issue 22: at b9e6429 every such program crashed
at its first context on a real GPU). Each must create its context, allocate, be refused at the cap,
be told the cap, and exit cleanly, with one C library in the process and its own pthread key
untouched; the simulated driver reports any illegal call or overwritten per-thread state
(tests/run_isolated.sh fails the test on such a report)."""
import os
import subprocess
import sys

import pytest

from test_preloaded import environment, libslice_lines

PROGRAMS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs")
MiB = 1 << 20


def run(program, preload):
    variables = {"SLICE_MEMORY_LIMIT": "256Mi", "SLICE_TENANT": "python-programs"} if preload else {}
    out = subprocess.run([sys.executable, os.path.join(PROGRAMS, program)], env=environment(preload, **variables),
                         capture_output=True, text=True, timeout=60)
    facts = dict(row.split("=", 1) for row in out.stdout.splitlines() if "=" in row)
    return out, facts


@pytest.mark.parametrize("program", ["context_ctypes.py", "context_cuda_bindings.py"])
def test_python_program_under_libslice(program):
    out, facts = run(program, preload=True)
    assert out.returncode == 0, f"exit {out.returncode}\n{out.stdout}\n{out.stderr}"
    for call in ("cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent", "cuMemAlloc_v2 64 MiB",
                 "cuMemGetInfo_v2", "cuMemFree_v2", "cuDevicePrimaryCtxRelease_v2"):
        assert facts.get(call) == "0", (call, out.stdout)
    assert facts["cuMemAlloc_v2 512 MiB"] == "2", out.stdout  # CUDA_ERROR_OUT_OF_MEMORY: past the cap
    assert int(facts["total"]) == 256 * MiB, out.stdout
    assert facts["libc copies"] == "1", out.stdout
    assert facts["own key"] == "0", out.stdout
    assert [line for line in libslice_lines(out.stderr) if " warn: " not in line] == [], out.stderr


@pytest.mark.parametrize("program", ["context_ctypes.py", "context_cuda_bindings.py"])
def test_python_program_without_libslice(program):
    out, facts = run(program, preload=False)
    assert out.returncode == 0, f"exit {out.returncode}\n{out.stdout}\n{out.stderr}"
    assert facts["cuMemAlloc_v2 512 MiB"] == "0", out.stdout
    assert int(facts["total"]) > 256 * MiB, out.stdout
    assert facts["libc copies"] == "1" and facts["own key"] == "0", out.stdout
