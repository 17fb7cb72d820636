"""slicectl top and slicectl metrics against a live coordinator: tenants are real processes
(slicectl_tenant_holder) on fake GPUs, their compute figures are written into their files by
slicectl_compute_writer, and slicectl runs as a subprocess: its metrics read by a strict reader of
the exposition format (exposition_format.py) and, when installed, by prometheus_client, and compared
with slicectl status --json; metrics --listen scraped over HTTP; top drawn on a pseudo-terminal.

Run by CTest (tests/slicectl/CMakeLists.txt) with SLICECTL, TENANT_HOLDER and COMPUTE_WRITER set.
"""
import fcntl
import http.client
import importlib.util
import json
import os
import pty
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import termios
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import exposition_format  # noqa: E402

SLICECTL = os.environ["SLICECTL"]
TENANT_HOLDER = os.environ["TENANT_HOLDER"]
COMPUTE_WRITER = os.environ["COMPUTE_WRITER"]
SCRATCH = os.environ.get("SLICE_TEST_TMPDIR", "/tmp")

GPU_A = "GPU-11111111-1111-1111-1111-111111111111"
GPU_B = "GPU-22222222-2222-2222-2222-222222222222"
DEVICE_A = "11:Fake GPU A:25769803776"  # 24 GiB
DEVICE_B = "22:Fake GPU B:8589934592"  # 8 GiB
MiB, GiB = 1 << 20, 1 << 30

# Every family slicectl metrics writes, and its type.
FAMILIES = {
    "slice_coordinator_warnings": "gauge",
    "slice_device_memory_total_bytes": "gauge",
    "slice_device_memory_used_bytes": "gauge",
    "slice_tenant_memory_used_bytes": "gauge",
    "slice_tenant_memory_overhead_bytes": "gauge",
    "slice_tenant_memory_cap_bytes": "gauge",
    "slice_tenant_compute_share_ratio": "gauge",
    "slice_tenant_compute_limit_ratio": "gauge",
    "slice_tenant_compute_received_1s_ratio": "gauge",
    "slice_tenant_compute_received_10s_ratio": "gauge",
    "slice_tenant_processes": "gauge",
    "slice_tenant_dead_processes": "gauge",
    "slice_tenant_device_seconds_total": "counter",
    "slice_tenant_memory_byte_seconds_total": "counter",
}
# Counters that grow while the tenants' processes hold memory: between two readings, a later one is
# larger (the metrics are checked between a status read before and one after them).
GROWING = {"slice_tenant_memory_byte_seconds_total"}


def without_growing(text):
    """The exposition without the samples of GROWING families (two readings differ only there)."""
    return "".join(line for line in text.splitlines(keepends=True) if line.split("{")[0] not in GROWING)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
CSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")


class Holder:
    """One process of a tenant, alive until stop()."""

    def __init__(self, coordinator, args):
        env = dict(os.environ, SLICE_COORDINATOR_DIR=coordinator)
        self.proc = subprocess.Popen([TENANT_HOLDER] + args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=env, text=True)
        ready = self.proc.stdout.readline().strip()
        if ready != "ready":
            self.stop()
            raise RuntimeError(f"the tenant holder did not start: {ready!r}")

    @property
    def pid(self):
        return self.proc.pid

    def stop(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


def run(args, timeout=30, **kwargs):
    return subprocess.run(args, capture_output=True, timeout=timeout, **kwargs)


class LiveCoordinator(unittest.TestCase):
    """A coordinator with three tenants: inference on GPUs B and A (two processes, a cap, its own
    share and limit), training on A (no cap), idle on A (no compute measured yet). inference
    received 30% of A's time over the last second (3% over ten), training all of it (5 s in the
    last ten: 50%)."""

    def setUp(self):
        root = os.path.join(SCRATCH, self.id().rsplit(".", 1)[-1])
        os.makedirs(root, exist_ok=True)
        self.dir = os.path.join(root, "coordinator")
        self.holders = []
        inference = ["--tenant", "inference", "--memory", "4Gi", "--compute", "30", "--limit", "50", "--priority",
                     "high"]
        self.server = self.holder(inference + ["--device", DEVICE_B, "--device", DEVICE_A, "--reserve",
                                               f"0:{256 * MiB}", "--reserve", f"1:{GiB}", "--comm", "server"])
        self.worker = self.holder(inference + ["--device", DEVICE_A, "--reserve", f"0:{512 * MiB}",
                                               "--comm", "worker"])
        self.trainer = self.holder(["--tenant", "training", "--device", DEVICE_A, "--reserve", f"0:{2 * GiB}",
                                    "--comm", "trainer"])
        self.idle = self.holder(["--tenant", "idle", "--device", DEVICE_A, "--comm", "idler"])
        self.write_compute("inference", GPU_A, 300_000_000)
        self.write_compute("training", GPU_A, 5_000_000_000)

    def tearDown(self):
        for h in self.holders:
            h.stop()

    def holder(self, args):
        h = Holder(self.dir, args)
        self.holders.append(h)
        return h

    def write_compute(self, tenant, uuid, received_ns):
        r = run([COMPUTE_WRITER, tenant, uuid, str(received_ns)], env=dict(os.environ, SLICE_COORDINATOR_DIR=self.dir))
        self.assertEqual(r.returncode, 0, r.stderr)

    def slicectl(self, *args, **kwargs):
        return run([SLICECTL, *args, "--coordinator", self.dir], **kwargs)

    def metrics(self):
        r = self.slicectl("metrics")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, b"")
        return r.stdout.decode("utf-8")  # strict: the format is UTF-8

    def status(self):
        r = self.slicectl("status", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    def assert_status_figures(self, samples, before, after):
        """The samples are what status --json said: exactly, or for GROWING counters between what it
        said before and after the metrics were read."""
        low, high = self.expected_samples(before), self.expected_samples(after)
        self.assertEqual(set(samples), set(high))
        for key, value in samples.items():
            if key[0] in GROWING:
                self.assertGreaterEqual(value, low[key] * (1 - 1e-12), key)
                self.assertLessEqual(value, high[key] * (1 + 1e-12), key)
            else:
                self.assertEqual(value, high[key], key)

    def expected_samples(self, status):
        """What the metrics must say, from slicectl status --json."""
        out = {("slice_coordinator_warnings", ()): float(len(status["warnings"]))}
        for d in status["devices"]:
            device = (("device", str(d["index"])), ("uuid", d["uuid"]))
            out[("slice_device_memory_total_bytes", device)] = float(d["total_bytes"])
            out[("slice_device_memory_used_bytes", device)] = float(d["used_bytes"])
            for t in d["tenants"]:
                labels = tuple(sorted(device + (("tenant", t["name"]),)))
                figures = {
                    "slice_tenant_memory_used_bytes": t["memory_used_bytes"],
                    "slice_tenant_memory_overhead_bytes": t["memory_overhead_bytes"],
                    "slice_tenant_memory_cap_bytes": t["memory_limit_bytes"],
                    "slice_tenant_compute_share_ratio": t["compute_share"] / 100,
                    "slice_tenant_compute_limit_ratio": t["compute_limit"] / 100,
                    "slice_tenant_compute_received_1s_ratio": t["compute_used_1s"],
                    "slice_tenant_compute_received_10s_ratio": t["compute_used_10s"],
                    "slice_tenant_processes": len(t["processes"]),
                    "slice_tenant_dead_processes": t["dead_processes"],
                    "slice_tenant_device_seconds_total": t["device_seconds_total"],
                    "slice_tenant_memory_byte_seconds_total": t["memory_byte_seconds_total"],
                }
                for name, value in figures.items():
                    if value is not None:  # unknown: no sample
                        out[(name, labels)] = float(value)
        return out


class MetricsTest(LiveCoordinator):
    def test_metrics_are_the_status_figures_in_the_exposition_format(self):
        before = self.status()
        text = self.metrics()
        families, samples = exposition_format.parse(text)
        self.assertEqual({name: f["type"] for name, f in families.items()}, FAMILIES)
        for name, f in families.items():
            self.assertTrue(name.startswith("slice_"), name)
            self.assertTrue(f["help"], name)
        self.assert_status_figures(samples, before, self.status())
        # The figures themselves, not only their agreement with status.
        tenant = lambda name, uuid, index: (("device", str(index)), ("tenant", name), ("uuid", uuid))
        a_inference, b_inference = tenant("inference", GPU_A, 0), tenant("inference", GPU_B, 1)
        a_training, a_idle = tenant("training", GPU_A, 0), tenant("idle", GPU_A, 0)
        expect = {
            ("slice_device_memory_total_bytes", (("device", "0"), ("uuid", GPU_A))): 24 * GiB,
            ("slice_device_memory_used_bytes", (("device", "0"), ("uuid", GPU_A))): GiB + 512 * MiB + 2 * GiB,
            ("slice_device_memory_used_bytes", (("device", "1"), ("uuid", GPU_B))): 256 * MiB,
            ("slice_tenant_memory_used_bytes", a_inference): GiB + 512 * MiB,
            ("slice_tenant_memory_cap_bytes", a_inference): 4 * GiB,
            ("slice_tenant_memory_cap_bytes", b_inference): 4 * GiB,
            ("slice_tenant_compute_share_ratio", a_inference): 0.3,
            ("slice_tenant_compute_limit_ratio", a_inference): 0.5,
            ("slice_tenant_compute_share_ratio", a_training): 1.0,
            ("slice_tenant_compute_received_1s_ratio", a_inference): 0.3,
            ("slice_tenant_compute_received_10s_ratio", a_inference): 0.03,
            ("slice_tenant_compute_received_1s_ratio", a_training): 1.0,
            ("slice_tenant_compute_received_10s_ratio", a_training): 0.5,
            ("slice_tenant_processes", a_inference): 2,
            ("slice_tenant_processes", a_idle): 1,
            ("slice_tenant_dead_processes", a_inference): 0,
            ("slice_coordinator_warnings", ()): 0,
        }
        for key, value in expect.items():
            self.assertEqual(samples.get(key), value, key)
        # Unknown figures have no sample: training has no cap, idle no compute measured, nor
        # inference on B.
        for missing in [("slice_tenant_memory_cap_bytes", a_training),
                        ("slice_tenant_compute_received_1s_ratio", a_idle),
                        ("slice_tenant_compute_received_10s_ratio", b_inference)]:
            self.assertNotIn(missing, samples)
        # Bytes as exact integers, never in a float's exponent form.
        self.assertIn('slice_device_memory_total_bytes{device="0",uuid="' + GPU_A + '"} 25769803776\n', text)

    def test_metrics_follow_the_coordinator(self):
        self.trainer.stop()
        self.holders.remove(self.trainer)
        os.makedirs(os.path.join(self.dir, "policy"), exist_ok=True)
        with open(os.path.join(self.dir, "tenants", "broken"), "w") as f:
            f.write("not a tenant file")
        before = self.status()
        _, samples = exposition_format.parse(self.metrics())
        self.assert_status_figures(samples, before, self.status())
        self.assertEqual(samples[("slice_coordinator_warnings", ())], 1)
        a_training = (("device", "0"), ("tenant", "training"), ("uuid", GPU_A))
        self.assertEqual(samples[("slice_tenant_processes", a_training)], 0)
        self.assertEqual(samples[("slice_tenant_memory_used_bytes", a_training)], 0)

    @unittest.skipUnless(importlib.util.find_spec("prometheus_client"),
                         "prometheus_client is not installed (scripts/setup.sh --python installs it in build/venv)")
    def test_prometheus_client_reads_the_same(self):
        from prometheus_client.parser import text_string_to_metric_families
        text = self.metrics()
        _, ours = exposition_format.parse(text)
        theirs, types = {}, {}
        for family in text_string_to_metric_families(text):
            # The parser names a counter's family without its _total.
            types[family.name + ("_total" if family.type == "counter" else "")] = family.type
            for s in family.samples:
                theirs[(s.name, tuple(sorted(s.labels.items())))] = s.value
        self.assertEqual(theirs, ours)
        self.assertEqual(types, FAMILIES)

    def test_usage_and_missing_coordinator(self):
        r = run([SLICECTL, "metrics", "--bogus"])
        self.assertEqual(r.returncode, 2)
        self.assertIn(b"unknown option '--bogus'", r.stderr)
        self.assertIn(b"usage: slicectl metrics", r.stderr)
        r = run([SLICECTL, "metrics", "--listen"])
        self.assertEqual(r.returncode, 2)
        self.assertIn(b"--listen needs a value", r.stderr)
        # No coordinator yet: an idle machine, no tenant's series. A file in its place: an error.
        missing = self.dir + "/nothing-here"
        r = run([SLICECTL, "metrics", "--coordinator", missing])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(b"\nslice_coordinator_warnings 0\n", r.stdout)
        self.assertNotIn(b"\nslice_tenant_", r.stdout)
        with open(self.dir + "/a-file", "w") as f:
            f.write("x")
        r = run([SLICECTL, "metrics", "--coordinator", self.dir + "/a-file"])
        self.assertEqual(r.returncode, 1)
        self.assertIn(b"not a directory", r.stderr)
        self.assertEqual(r.stdout, b"")
        help_text = run([SLICECTL, "metrics", "--help"])
        self.assertEqual(help_text.returncode, 0)
        for part in (b"usage: slicectl metrics", b"--listen ADDR:PORT", b"127.0.0.1", b"--coordinator DIR"):
            self.assertIn(part, help_text.stdout)
        self.assertIn(b"metrics [--listen ADDR:PORT]", run([SLICECTL, "--help"]).stdout)


class ExpositionCheckerTest(unittest.TestCase):
    """The reader above must refuse what the format refuses, or the test proves nothing."""

    GOOD = '# HELP m_bytes Help with \\\\ and \\n.\n# TYPE m_bytes gauge\nm_bytes{a="x\\"y\\\\z\\n",b="2"} 1.5\n'

    def test_good(self):
        families, samples = exposition_format.parse(self.GOOD)
        self.assertEqual(families["m_bytes"], {"type": "gauge", "help": "Help with \\ and \n."})
        self.assertEqual(samples, {("m_bytes", (("a", 'x"y\\z\n'), ("b", "2"))): 1.5})

    def test_refused(self):
        bad = {
            "no TYPE": "# HELP m h\nm 1\n",
            "no HELP": "# TYPE m gauge\nm 1\n",
            "unknown type": "# HELP m h\n# TYPE m meter\nm 1\n",
            "unescaped quote": '# HELP m h\n# TYPE m gauge\nm{a="x"y"} 1\n',
            "bad escape": '# HELP m h\n# TYPE m gauge\nm{a="x\\t"} 1\n',
            "bad label name": '# HELP m h\n# TYPE m gauge\nm{1a="x"} 1\n',
            "bad value": "# HELP m h\n# TYPE m gauge\nm 1,5\n",
            "no last line feed": "# HELP m h\n# TYPE m gauge\nm 1",
            "another family's sample": "# HELP m h\n# TYPE m gauge\nn 1\n",
            "split family": "# HELP m h\n# TYPE m gauge\nm 1\n# HELP n h\n# TYPE n gauge\nn 1\nm{a=\"b\"} 2\n",
            "duplicate series": "# HELP m h\n# TYPE m gauge\nm 1\nm 2\n",
            "two spaces": "# HELP m h\n# TYPE m gauge\nm  1\n",
        }
        for why, text in bad.items():
            with self.assertRaises(exposition_format.FormatError, msg=why):
                exposition_format.parse(text)


def http_request(address, method, path, timeout=10):
    host, port = address
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    c.request(method, path)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r, body


class ListenTest(LiveCoordinator):
    def start(self, listen):
        proc = subprocess.Popen([SLICECTL, "metrics", "--listen", listen, "--coordinator", self.dir],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        first = proc.stdout.readline().decode()
        m = re.fullmatch(r"listening on http://(127\.0\.0\.1|\[::1\]):(\d+)/metrics\n", first)
        if not m:
            proc.kill()
            proc.wait()
            self.fail(f"first line {first!r}, stderr {proc.stderr.read()!r}")
        self.assertNotEqual(m.group(2), "0")
        return proc, (m.group(1).strip("[]"), int(m.group(2)))

    def stop(self, proc, sig=signal.SIGTERM):
        proc.send_signal(sig)
        try:
            rc = proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
            proc.stderr.close()
        return rc

    def test_serves_metrics_to_a_scrape(self):
        proc, address = self.start("127.0.0.1:0")
        try:
            # A client that connects and never sends must not hold the others up.
            silent = socket.create_connection(address)
            half = socket.create_connection(address)
            half.sendall(b"GET /metr")
            before = self.status()
            r, body = http_request(address, "GET", "/metrics")
            self.assertEqual(r.status, 200)
            self.assertEqual(r.getheader("Content-Type"), CONTENT_TYPE)
            self.assertEqual(int(r.getheader("Content-Length")), len(body))
            self.assertEqual(without_growing(body.decode("utf-8")), without_growing(self.metrics()))
            _, samples = exposition_format.parse(body.decode("utf-8"))
            self.assert_status_figures(samples, before, self.status())
            r, _ = http_request(address, "GET", "/metrics?name[]=x")
            self.assertEqual(r.status, 200)
            r, head_body = http_request(address, "HEAD", "/metrics")
            self.assertEqual((r.status, head_body), (200, b""))
            r, _ = http_request(address, "GET", "/")
            self.assertEqual(r.status, 404)
            r, _ = http_request(address, "GET", "/metricsx")
            self.assertEqual(r.status, 404)
            r, _ = http_request(address, "POST", "/metrics")
            self.assertEqual(r.status, 405)
            self.assertEqual(r.getheader("Allow"), "GET, HEAD")
            with socket.create_connection(address) as raw:
                raw.sendall(b"nonsense\r\n\r\n")
                self.assertTrue(raw.recv(100).startswith(b"HTTP/1.1 400 "))
            silent.close()
            half.close()
        finally:
            rc = self.stop(proc)
        self.assertEqual(rc, 0)

    def test_port_only_listens_on_loopback_and_sigint_stops_it(self):
        proc, address = self.start("0")
        self.assertEqual(address[0], "127.0.0.1")
        r, _ = http_request(address, "GET", "/metrics")
        self.assertEqual(r.status, 200)
        self.assertEqual(self.stop(proc, signal.SIGINT), 0)
        proc, address = self.start(":0")
        self.assertEqual(address[0], "127.0.0.1")
        self.assertEqual(self.stop(proc), 0)

    def test_a_port_in_use_and_a_bad_address(self):
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            r = self.slicectl("metrics", "--listen", f"127.0.0.1:{port}", timeout=10)
            self.assertEqual(r.returncode, 1, r)
            self.assertIn(f"127.0.0.1:{port}: the port is in use".encode(), r.stderr)
            self.assertEqual(r.stdout, b"")
        for bad in ["", "abc", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:http", "::1:80", "[::1]", "1.2.3.4:-1"]:
            r = self.slicectl("metrics", "--listen", bad, timeout=30)
            self.assertEqual(r.returncode, 2, (bad, r))
            self.assertIn(b"--listen", r.stderr)
            self.assertEqual(r.stdout, b"")

    def scrape_once(self, coordinator):
        """One scrape of `metrics --listen` serving `coordinator`: (HTTP status, body)."""
        proc = subprocess.Popen([SLICECTL, "metrics", "--listen", "127.0.0.1:0", "--coordinator", coordinator],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        first = proc.stdout.readline().decode()
        port = int(re.search(r":(\d+)/metrics", first).group(1))
        try:
            r, body = http_request(("127.0.0.1", port), "GET", "/metrics")
            return r.status, body
        finally:
            self.assertEqual(self.stop(proc), 0)

    def test_idle_machine_is_served_and_a_broken_coordinator_is_a_503(self):
        # No coordinator yet: 200, no tenant's series.
        status, body = self.scrape_once(self.dir + "/nothing-here")
        self.assertEqual(status, 200)
        self.assertNotIn(b"\nslice_tenant_", body)
        # A coordinator that cannot be read: 503, and why.
        with open(self.dir + "/a-file", "w") as f:
            f.write("x")
        status, body = self.scrape_once(self.dir + "/a-file")
        self.assertEqual(status, 503)
        self.assertIn(b"not a directory", body)


class TopTest(LiveCoordinator):
    def test_snapshot_when_not_a_terminal(self):
        start = time.monotonic()
        r = self.slicectl("top")
        self.assertLess(time.monotonic() - start, 20)
        self.assertEqual(r.returncode, 0, r.stderr)
        text = r.stdout.decode("ascii")
        self.assertNotIn("\x1b", text)
        for part in ("inference", "training", "idle", f"{self.server.pid} server", f"{self.trainer.pid} trainer",
                     "GPU 0  Fake GPU A", "GPU 1  Fake GPU B", "memory", "time 1s"):
            self.assertIn(part, text)
        # A UUID is shown whole or not at all.
        self.assertEqual(re.findall(r"GPU-[0-9a-f-]*", text), re.findall(r"GPU-[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}", text))
        # Not a terminal: 80 columns, whatever $COLUMNS says.
        wide = run([SLICECTL, "top", "--coordinator", self.dir], env=dict(os.environ, COLUMNS="200"))
        self.assertEqual(max(map(len, wide.stdout.splitlines())), 80)
        for line in text.splitlines():
            self.assertLessEqual(len(line), 80, line)
        # inference's row on GPU A: 2 processes, 1.5 of 4 GiB, share 30%, 30% and 3% received.
        row = next(l for l in text.splitlines() if l.startswith("  B inference"))
        self.assertEqual(row.split()[2:], ["2", "1.5", "GiB", "/", "4.0", "GiB", "30%", "30.0%", "3.0%"])
        # GPU A's bars, 60 columns at 80 (tenants lettered by name: idle A, inference B, training C):
        # memory, inference 1.5 GiB of 24 and training 2 GiB; time, inference 30% and training the
        # rest (it claims all of it).
        bars = [l for l in text.splitlines() if l.startswith("  memory") or l.startswith("  time 1s")]
        self.assertEqual(bars[0], "  memory   [" + "B" * 4 + "C" * 5 + "." * 51 + "] 14.6%")
        self.assertEqual(bars[1], "  time 1s  [" + "B" * 18 + "C" * 42 + "] 100.0%")

    def test_usage(self):
        for args, message in [(["--interval", "0"], b"--interval '0' is not valid"),
                              (["--interval", "x"], b"--interval 'x' is not valid"),
                              (["--bogus"], b"unknown option '--bogus'")]:
            r = self.slicectl("top", *args)
            self.assertEqual(r.returncode, 2, r)
            self.assertIn(message, r.stderr)
        r = run([SLICECTL, "top", "--coordinator", self.dir + "/nothing-here"])
        self.assertEqual(r.returncode, 0, r.stderr)  # an idle machine
        self.assertIn(b"no tenant", r.stdout)
        with open(self.dir + "/a-file", "w") as f:
            f.write("x")
        r = run([SLICECTL, "top", "--coordinator", self.dir + "/a-file"])
        self.assertEqual(r.returncode, 1)
        self.assertIn(b"not a directory", r.stderr)

    def on_terminal(self, columns, rows, *args):
        """slicectl top on a new pseudo-terminal of columns x rows; (process, master fd, slave fd,
        the terminal's settings before it started)."""
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        before = termios.tcgetattr(slave)
        proc = subprocess.Popen([SLICECTL, "top", "--coordinator", self.dir, *args], stdin=slave, stdout=slave,
                                stderr=slave, start_new_session=True)
        return proc, master, slave, before

    def read_until(self, master, done, timeout=20):
        out = b""
        deadline = time.monotonic() + timeout
        while not done(out) and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    out += os.read(master, 65536)
                except OSError:  # EIO: the terminal's last user closed it
                    break
        return out

    def frames(self, output):
        """The frames drawn whole (each starts at the top left; the last one read may be cut short,
        so only those another one followed count), as lists of lines without escapes."""
        # The terminal turns "\n" into "\r\n" on the way (ONLCR): carriage returns say nothing here.
        drawn = [CSI.sub(b"", frame).replace(b"\r", b"") for frame in output.split(b"\x1b[H")[1:-1]]
        return [frame.decode("ascii").split("\n") for frame in drawn if frame.strip()]

    def test_draws_on_a_terminal_of_80_columns_and_q_quits(self):
        proc, master, slave, before = self.on_terminal(80, 24)
        try:
            out = self.read_until(master, lambda o: len(self.frames(o)) >= 1)
            frames = self.frames(out)
            self.assertTrue(frames, out)
            self.assertIn("\x1b[?1049h".encode(), out)  # the alternate screen
            last = frames[-1]
            self.assertLessEqual(len(last), 24)
            for line in last:
                self.assertLessEqual(len(line), 80, line)
            text = "\n".join(last)
            for part in ("inference", "training", "q quits", "GPU 0"):
                self.assertIn(part, text)
            # A narrower window (SIGWINCH) is drawn at once at its width.
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 50, 0, 0))
            proc.send_signal(signal.SIGWINCH)
            out = self.read_until(master, lambda o: any(max(map(len, f)) == 50 for f in self.frames(o)))
            narrow = [f for f in self.frames(out) if max(map(len, f)) == 50]
            self.assertTrue(narrow, out)
            for line in narrow[0]:
                self.assertLessEqual(len(line), 50, line)
            start = time.monotonic()
            os.write(master, b"q")
            self.assertEqual(proc.wait(timeout=10), 0)
            self.assertLess(time.monotonic() - start, 5)
            out = self.read_until(master, lambda o: o.endswith(b"\x1b[?1049l"), timeout=5)
            self.assertTrue(out.endswith(b"\x1b[?25h\x1b[?1049l"), out[-200:])  # cursor and screen back
            self.assertEqual(termios.tcgetattr(slave), before)  # echo and line editing back
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            os.close(master)
            os.close(slave)

    def test_ctrl_c_restores_the_terminal(self):
        proc, master, slave, before = self.on_terminal(80, 10, "--interval", "0.2")
        try:
            out = self.read_until(master, lambda o: len(self.frames(o)) >= 3)
            self.assertGreaterEqual(len(self.frames(out)), 3, out)  # redrawn
            # 10 rows: cut, and said so.
            self.assertIn("more lines", self.frames(out)[-1][-1])
            self.assertEqual(len(self.frames(out)[-1]), 10)
            proc.send_signal(signal.SIGINT)
            self.assertEqual(proc.wait(timeout=10), 0)
            out = self.read_until(master, lambda o: o.endswith(b"\x1b[?1049l"), timeout=5)
            self.assertTrue(out.endswith(b"\x1b[?25h\x1b[?1049l"), out[-200:])
            self.assertEqual(termios.tcgetattr(slave), before)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            os.close(master)
            os.close(slave)


if __name__ == "__main__":
    unittest.main()
