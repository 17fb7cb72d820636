"""Real clients nobody here wrote (NVIDIA's cuda-bindings, nvidia-ml-py, nvitop) under
LD_PRELOAD=libslice.so on the simulated GPU: the memory cap, the slice they see, the tenant's own
processes, monitors of a tenant, tenants inherited by child processes, and bad values.

Each client runs in a process of its own (tests/clients/sliced_client.py) with the variables of its
case; the test reads what it answers, its standard error (libslice's log lines) and the simulator's
ground truth (simgpu-stat). Every process started here is killed when its test ends, and every file
lies in the test's temporary directory (tests/run_isolated.sh)."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import process_entry, simgpu_stat

LIBSLICE = os.environ["LIBSLICE"]
CLIENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sliced_client.py")

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
DEVICE_BYTES = 24 * GiB  # the simulator's default device
UNITS = {"B": 1, "KiB": KiB, "MiB": MiB, "GiB": GiB, "TiB": 1 << 40}


# ---- processes under libslice ----

def environment(preload=True, **variables):
    """This test's environment for a client: the test's own coordinator directory and simulator
    state, no SLICE_* variable but those given (None: unset), and libslice preloaded or not."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_PRELOAD", "PYTEST_CURRENT_TEST")
           and (not k.startswith("SLICE_") or k in ("SLICE_COORDINATOR_DIR", "SLICE_TEST_TMPDIR"))}
    if preload:
        env["LD_PRELOAD"] = LIBSLICE
    env.update({k: str(v) for k, v in variables.items() if v is not None})
    return env


def libslice_lines(text):
    return [line for line in text.splitlines() if line.startswith("libslice[")]


class Client:
    """A running sliced_client.py: call it with a request, read its answer and its stderr."""

    def __init__(self, env, log_path):
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, CLIENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=log, text=True, env=env, start_new_session=True)
        self.pid = self.proc.pid

    def __call__(self, op, **args):
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the client died during {op}; its stderr:\n{self.stderr()}"
        answer = json.loads(line)
        assert "exception" not in answer, f"{op}: {answer['exception']}; stderr:\n{self.stderr()}"
        return answer

    def stderr(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def finish(self):
        """Lets the client exit on its own (end of input); its memory goes with it."""
        self.proc.stdin.close()
        assert self.proc.wait(timeout=20) == 0, self.stderr()

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the whole session: any child it started too
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.proc.stdin.close()
        self.proc.stdout.close()


@pytest.fixture
def scratch():
    """A directory for the clients' logs, inside the test's temporary directory."""
    base = os.environ.get("SLICE_TEST_TMPDIR")
    path = tempfile.mkdtemp(prefix="preloaded-", dir=base)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def clients(scratch):
    """Starts long-lived clients: clients(preload=True, SLICE_TENANT=..., ...); kills them all afterwards."""
    started = []

    def start(preload=True, **variables):
        client = Client(environment(preload, **variables), os.path.join(scratch, f"client-{len(started)}.log"))
        started.append(client)
        return client

    yield start
    for client in started:
        client.kill()


def run_once(env, *requests, timeout=60):
    """Runs sliced_client.py with the requests as arguments; returns its answers and its stderr."""
    done = subprocess.run([sys.executable, CLIENT, *(json.dumps(r) for r in requests)], env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(answers) == len(requests), (done.stdout, done.stderr)
    return answers, done.stderr


def human_bytes(text):
    """'3.0 GiB' -> bytes, and how far the printed figure may be off (half its last digit)."""
    m = re.fullmatch(r"([\d.]+) ?([KMGT]?i?B)", text)
    assert m, text
    number, unit = m.groups()
    decimals = len(number.partition(".")[2])
    return float(number) * UNITS[unit], 0.5 * 10 ** -decimals * UNITS[unit]


def check_refusal_line(line, *, pid, tenant, uuid, request, usage, cap):
    """One warn line: which tenant, device, request, usage and cap."""
    assert line.startswith(f"libslice[{pid}] warn: "), line
    assert f"tenant '{tenant}'" in line, line
    assert uuid in line, line
    assert "cuMemAlloc" in line and "refused" in line, line
    assert f"({request} bytes)" in line, line
    m = re.search(r"usage ([\d.]+ ?[KMGT]?i?B) of cap ([\d.]+ ?[KMGT]?i?B)", line)
    assert m, line
    for printed, wanted in zip(m.groups(), (usage, cap)):
        value, slack = human_bytes(printed)
        assert abs(value - wanted) <= slack, (printed, wanted, line)


# ---- the cap, through cuda-bindings ----

@pytest.mark.parametrize("limit, chunk, cap", [
    ("3Gi", GiB, 3 * GiB),
    ("1Gi", 256 * MiB, GiB),
    ("25%", GiB, DEVICE_BYTES // 4),
], ids=["3Gi-in-1GiB-blocks", "1Gi-in-256MiB-blocks", "25%-in-1GiB-blocks"])
def test_cuda_bindings_is_refused_exactly_at_the_cap(clients, limit, chunk, cap):
    tenant = "cap-" + limit.replace("%", "pct")
    client = clients(SLICE_MEMORY_LIMIT=limit, SLICE_TENANT=tenant)
    assert client("init")["cuInit"] == "CUDA_SUCCESS"
    assert client("mem_info") == {"free": cap, "total": cap, "device_total": cap}

    assert client("alloc", size=chunk)["result"] == "CUDA_SUCCESS"
    assert client("mem_info") == {"free": cap - chunk, "total": cap, "device_total": cap}
    filled = client("fill", chunk=chunk)
    assert (filled["count"] + 1, filled["refused_with"]) == (cap // chunk, "CUDA_ERROR_OUT_OF_MEMORY")
    assert client("mem_info") == {"free": 0, "total": cap, "device_total": cap}

    # The refusal was libslice's: the device itself had plenty left.
    truth = simgpu_stat()["devices"][0]
    assert truth["total_bytes"] == DEVICE_BYTES
    assert truth["used_bytes"] == cap
    assert truth["total_bytes"] - truth["used_bytes"] >= 2 * chunk
    assert process_entry(simgpu_stat(), client.pid)["memory_bytes"] == cap

    lines = libslice_lines(client.stderr())
    assert len(lines) == 1, lines
    check_refusal_line(lines[0], pid=client.pid, tenant=tenant, uuid=truth["uuid"], request=chunk, usage=cap, cap=cap)

    # Freeing gives the room back at once, and no more than that.
    assert client("free", count=1)["results"] == ["CUDA_SUCCESS"]
    assert client("mem_info")["free"] == chunk
    assert client("alloc", size=chunk)["result"] == "CUDA_SUCCESS"
    assert client("alloc", size=chunk)["result"] == "CUDA_ERROR_OUT_OF_MEMORY"
    assert len(libslice_lines(client.stderr())) == 2
    client("free")
    assert client("mem_info") == {"free": cap, "total": cap, "device_total": cap}
    client.finish()
    assert libslice_lines(client.stderr())[2:] == []


# ---- NVML in the allocating process ----

def test_pynvml_in_the_process_sees_its_slice_and_only_its_tenants_processes(clients, load_process):
    other_tenant = load_process("--seconds", "60", "--alloc-mib", "2048",
                                env=environment(SLICE_TENANT="pynvml-other", SLICE_MEMORY_LIMIT="4Gi"))
    no_tenant = load_process("--seconds", "60", "--alloc-mib", "1024", env=environment(preload=False))
    client = clients(SLICE_TENANT="pynvml-self", SLICE_MEMORY_LIMIT="1Gi")
    assert client("init")["cuInit"] == "CUDA_SUCCESS"
    assert client("alloc", size=256 * MiB)["result"] == "CUDA_SUCCESS"
    assert client("alloc", size=256 * MiB)["result"] == "CUDA_SUCCESS"

    # The others really hold memory on the same device.
    truth = simgpu_stat()
    assert truth["devices"][0]["used_bytes"] == 512 * MiB + 2 * GiB + 1 * GiB
    assert process_entry(truth, other_tenant.pid)["memory_bytes"] == 2 * GiB
    assert process_entry(truth, no_tenant.pid)["memory_bytes"] == 1 * GiB

    nvml = client("nvml")
    assert nvml["uuid"] == truth["devices"][0]["uuid"]
    assert nvml["memory_v1"] == {"total": GiB, "free": 512 * MiB, "used": 512 * MiB}
    assert nvml["memory_v2"] == {"total": GiB, "free": 512 * MiB, "used": 512 * MiB, "reserved": 0}
    mine = [[client.pid, 512 * MiB]]
    assert nvml["processes_v3"] == mine
    assert nvml["processes_v2"] == mine
    assert nvml["processes_v1"] == mine
    assert client("mem_info") == {"free": 512 * MiB, "total": GiB, "device_total": GiB}


# ---- monitors of a tenant: NVML only, no CUDA, not a member ----

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]")


def nvitop_once(env):
    """nvitop's one-shot report, without colours. It must run cleanly: no traceback on stderr (the
    simulator answers what it does not model as NVML_ERROR_NOT_SUPPORTED, as a real GPU would)."""
    done = subprocess.run([sys.executable, "-c", "import nvitop"], capture_output=True, text=True)
    assert done.returncode == 0, f"nvitop is not installed for {sys.executable} (scripts/setup.sh --python)"
    env = dict(env, TERM="xterm", COLUMNS="160", LINES="50")
    done = subprocess.run([sys.executable, "-m", "nvitop", "--once"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Traceback" not in done.stderr, done.stderr[-4000:]
    return ANSI.sub("", done.stdout)


def nvitop_processes(report):
    """{pid: GPU memory} of the process rows (GPU PID TYPE USER GPU-MEM ...)."""
    rows = re.findall(r"^│\s+\d+\s+(\d+)\s+\S+\s+\S+\s+(\S+)\s", report, re.M)
    return {int(pid): memory for pid, memory in rows}


@pytest.fixture
def watched(clients, load_process):
    """A tenant (cap 1 GiB) whose one process holds 768 MiB, next to another tenant's process that
    holds 2 GiB of the same device. Returns (tenant, its client, the other process)."""

    def start(tenant):
        other = load_process("--seconds", "60", "--alloc-mib", "2048",
                             env=environment(SLICE_TENANT=tenant + "-other", SLICE_MEMORY_LIMIT="4Gi"))
        client = clients(SLICE_TENANT=tenant, SLICE_MEMORY_LIMIT="1Gi")
        assert client("init")["cuInit"] == "CUDA_SUCCESS"
        for _ in range(3):
            assert client("alloc", size=256 * MiB)["result"] == "CUDA_SUCCESS"
        return client, other

    return start


def test_a_pynvml_monitor_with_the_tenants_name_sees_its_cap_and_usage(watched):
    client, other = watched("watched-pynvml")
    slice_view = {"total": GiB, "free": 256 * MiB, "used": 768 * MiB}

    # No cap of its own: the tenant's cap and usage, from the coordinator; the tenant's process only.
    (nvml,), err = run_once(environment(SLICE_TENANT="watched-pynvml"), {"op": "nvml"})
    assert nvml["memory_v1"] == slice_view
    assert nvml["memory_v2"] == dict(slice_view, reserved=0)
    mine = [[client.pid, 768 * MiB]]
    assert nvml["processes_v3"] == nvml["processes_v2"] == nvml["processes_v1"] == mine
    assert libslice_lines(err) == []
    # The monitor never touched CUDA: the simulator knows only the two allocating processes.
    # (This pytest process may hold a context of its own from the cuda-bindings tests: leave it out.)
    on_device = {p["pid"] for p in simgpu_stat()["devices"][0]["processes"]} - {os.getpid()}
    assert on_device == {client.pid, other.pid}

    # A monitor's own SLICE_MEMORY_LIMIT does not change a tenant that exists: the registered cap holds.
    (nvml,), _ = run_once(environment(SLICE_TENANT="watched-pynvml", SLICE_MEMORY_LIMIT="4Gi"), {"op": "nvml"})
    assert nvml["memory_v1"] == slice_view

    # Without a tenant, a monitor applies its own cap to the device's figures.
    (nvml,), _ = run_once(environment(SLICE_MEMORY_LIMIT="2Gi"), {"op": "nvml"})
    assert nvml["memory_v1"] == {"total": 2 * GiB, "free": 2 * GiB, "used": 0}


def test_nvitop_with_the_tenants_name_shows_the_slice(watched):
    client, other = watched("watched-nvitop")

    # The slice in the memory column (used / total), and the tenant's process only.
    report = nvitop_once(environment(SLICE_TENANT="watched-nvitop"))
    assert "768.0MiB / 1024MiB" in report, report
    assert nvitop_processes(report) == {client.pid: "768.0MiB"}, report

    # The same nvitop without libslice sees the whole device and everyone on it (so the checks
    # above read the right columns).
    report = nvitop_once(environment(preload=False))
    assert "2816MiB / 24.00GiB" in report, report
    everyone = nvitop_processes(report)
    everyone.pop(os.getpid(), None)
    assert everyone == {client.pid: "768.0MiB", other.pid: "2048MiB"}, report


# ---- tenants inherited by child processes ----

def test_a_child_process_joins_the_tenant_its_parent_was_given(clients):
    parent = clients(SLICE_MEMORY_LIMIT="1Gi")  # no SLICE_TENANT: libslice names one at cuInit
    assert parent("init")["cuInit"] == "CUDA_SUCCESS"
    # Nothing is written into the environment (issue 26): the child finds the tenant through its
    # lineage (libslice/coordinator/lineage.h), as libslice tells it (slice_get_info).
    assert parent("getenv", name="SLICE_TENANT")["value"] is None
    tenant = parent("tenant")["tenant"]
    assert tenant, "libslice named no tenant"
    assert parent("alloc", size=512 * MiB)["result"] == "CUDA_SUCCESS"

    # The child gets the parent's environment as any child does (its cap too, so only a shared
    # budget stops it at 512 MiB rather than 1 GiB).
    requests = [{"op": "init"}, {"op": "tenant"}, {"op": "fill", "chunk": 256 * MiB}, {"op": "mem_info"}]
    child = parent("run", argv=[sys.executable, CLIENT, *map(json.dumps, requests)])
    assert child["returncode"] == 0, child["stderr"]
    init, env, filled, mem = map(json.loads, child["stdout"].splitlines())
    assert init == {"cuInit": "CUDA_SUCCESS"}
    assert env["tenant"] == tenant
    assert (filled["count"], filled["refused_with"]) == (2, "CUDA_ERROR_OUT_OF_MEMORY")
    assert mem == {"free": 0, "total": GiB, "device_total": GiB}
    lines = libslice_lines(child["stderr"])
    assert len(lines) == 1, lines
    child_pid = int(re.match(r"libslice\[(\d+)\]", lines[0]).group(1))
    uuid = simgpu_stat()["devices"][0]["uuid"]
    check_refusal_line(lines[0], pid=child_pid, tenant=tenant, uuid=uuid, request=256 * MiB, usage=GiB, cap=GiB)

    # The child has exited: what it held comes back to the tenant.
    deadline = time.monotonic() + 2
    while parent("mem_info")["free"] != 512 * MiB and time.monotonic() < deadline:
        time.sleep(0.05)
    assert parent("mem_info") == {"free": 512 * MiB, "total": GiB, "device_total": GiB}
    assert parent("alloc", size=512 * MiB)["result"] == "CUDA_SUCCESS"
    assert libslice_lines(parent.stderr()) == []


# ---- bad values ----

def test_a_bad_memory_limit_fails_closed_with_one_error_line():
    (calls, nvml), err = run_once(environment(SLICE_MEMORY_LIMIT="12X"),
                                  {"op": "calls_after_failed_init"}, {"op": "nvml"})
    assert calls["cuInit"] == "CUDA_ERROR_INVALID_VALUE"
    assert calls["cuMemAlloc"] == "CUDA_ERROR_INVALID_VALUE"
    assert calls["cuMemGetInfo"] == "CUDA_ERROR_INVALID_VALUE"
    assert calls["cuDeviceGetCount"] != "CUDA_SUCCESS" and calls["cuDeviceGet"] != "CUDA_SUCCESS"
    assert nvml["exception"].startswith("NVMLError"), nvml
    lines = libslice_lines(err)
    assert len(lines) == 1, lines
    assert re.match(r"libslice\[\d+\] error: ", lines[0]), lines[0]
    assert "SLICE_MEMORY_LIMIT" in lines[0] and "'12X'" in lines[0], lines[0]
    example = re.search(r"example: SLICE_MEMORY_LIMIT=(\S+?)[;,]?(\s|$)", lines[0])
    assert example and re.fullmatch(r"\d+(\.\d+)?([KMGTPE]i?B?|%)?", example.group(1)), lines[0]
    # Nothing reached the device.
    assert simgpu_stat()["devices"][0]["used_bytes"] == 0


def test_a_bad_memory_limit_fails_every_later_driver_call_the_same_way():
    """The contract (ARCHITECTURE.md part A): cuInit returns CUDA_ERROR_INVALID_VALUE, and every
    later call fails the same way, not only the calls that libslice wraps."""
    (calls,), _ = run_once(environment(SLICE_MEMORY_LIMIT="12X"), {"op": "calls_after_failed_init"})
    assert calls == {name: "CUDA_ERROR_INVALID_VALUE" for name in calls}, calls


def test_slice_disable_runs_uncapped_even_with_a_bad_limit():
    free = DEVICE_BYTES - simgpu_stat()["devices"][0]["used_bytes"]
    answers, err = run_once(environment(SLICE_DISABLE="1", SLICE_MEMORY_LIMIT="12X"),
                            {"op": "init"}, {"op": "mem_info"}, {"op": "fill", "chunk": 4 * GiB}, {"op": "nvml"})
    init, mem, filled, nvml = answers
    assert init == {"cuInit": "CUDA_SUCCESS"}
    assert mem == {"free": free, "total": DEVICE_BYTES, "device_total": DEVICE_BYTES}
    assert filled["count"] == free // (4 * GiB)
    assert nvml["memory_v1"]["total"] == DEVICE_BYTES
    assert libslice_lines(err) == []
