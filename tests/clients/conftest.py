"""Shared helpers for the PyPI client tests: they run on the simulated GPU (LD_LIBRARY_PATH points
at build/simgpu) with a state file of their own (tests/run_isolated.sh sets SIMGPU_STATE)."""
import json
import os
import subprocess

import pytest

SIMGPU_STAT = os.environ["SIMGPU_STAT"]
SIMGPU_LOAD = os.environ["SIMGPU_LOAD"]


def simgpu_stat():
    out = subprocess.run([SIMGPU_STAT, "--json"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def process_entry(stat, pid, device=0):
    for p in stat["devices"][device]["processes"]:
        if p["pid"] == pid:
            return p
    return None


@pytest.fixture
def load_process():
    """Starts simgpu-load with the given options (and environment, default this one's) and waits
    until it is ready; kills it afterwards."""
    started = []

    def start(*args, env=None):
        proc = subprocess.Popen([SIMGPU_LOAD, *map(str, args)], stdout=subprocess.PIPE, text=True, env=env)
        line = proc.stdout.readline()
        assert line.strip() == "ready", f"simgpu-load did not start: {line!r}"
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()
        proc.wait()
