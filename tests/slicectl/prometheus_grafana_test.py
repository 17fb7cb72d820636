"""slicectl metrics as its real consumers read it. A program under libslice (simgpu-load with
LD_PRELOAD=libslice.so, a memory cap and a compute share) runs on the simulated GPU; then
- promtool lints the exposition `slicectl metrics` prints;
- a real Prometheus scrapes `slicectl metrics --listen 127.0.0.1:0` every second, and its series
  must carry the figures `slicectl status --json` shows;
- every query of the Grafana dashboard examples/grafana/libslice.json (its panels', rows' included,
  and its variables') must return data from that Prometheus: a panel that shows nothing fails the
  test by its title.

Run by CTest through tests/run_isolated.sh (its own coordinator, simulator state and temporary
folder), with SLICECTL, LIBSLICE, SIMGPU_LIB_DIR, SIMGPU_LOAD and DASHBOARD set. Without prometheus
or promtool on PATH (Debian's package `prometheus`) it says so and exits 77, which CTest counts as
skipped. Everything it starts listens on 127.0.0.1 only and is stopped before it exits.
"""
import ctypes
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

SKIPPED = 77
SLICECTL = os.environ["SLICECTL"]
LIBSLICE = os.environ["LIBSLICE"]
SIMGPU_LIB_DIR = os.environ["SIMGPU_LIB_DIR"]
SIMGPU_LOAD = os.environ["SIMGPU_LOAD"]
DASHBOARD = os.environ["DASHBOARD"]
TMP = os.environ.get("SLICE_TEST_TMPDIR")

MiB = 1 << 20
TENANT, CAP, SHARE, HELD_MIB = "inference", 1 << 30, 40, 384

# What Grafana puts in place of its own variables, about as it would for a 1 s scrape interval
# ($__rate_interval: 4 s or more) and a one-minute dashboard range. The dashboard's template variables become ".*" (All): only a =~
# matcher matches with that, so a panel that compares one with = fails here, as it would show
# nothing in Grafana with All selected.
BUILTINS = {"__rate_interval": "5s", "__interval": "1s", "__range": "1m", "__range_s": "60", "__range_ms": "60000"}
VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)")
# Never a proxy between the test and 127.0.0.1, whatever the environment says.
HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class Failure(Exception):
    pass


def die_with_parent():
    """In a child, before exec: SIGKILL when the test dies (a CTest timeout), so nothing outlives it."""
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG


def start(args, log, env=None):
    """args started with its standard error in the file log and its output read by first_line."""
    with open(log, "wb") as errors:
        return subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors, env=env,
                                preexec_fn=die_with_parent)


def first_line(proc, what, log, timeout=20):
    """The first line proc prints, waited for at most `timeout` seconds."""
    out, deadline = b"", time.monotonic() + timeout
    while b"\n" not in out:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([proc.stdout], [], [], left)[0]:
            raise Failure(f"{what} printed nothing in {timeout} s: {tail(log)}")
        chunk = os.read(proc.stdout.fileno(), 4096)
        if not chunk:
            raise Failure(f"{what} exited ({proc.wait(timeout=5)}) before its first line: {tail(log)}")
        out += chunk
    return out.split(b"\n", 1)[0].decode()


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    proc.stdout.close()


def tail(path, lines=15):
    with open(path, errors="replace") as f:
        return "\n" + "".join(f.readlines()[-lines:])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def slicectl(*args):
    r = subprocess.run([SLICECTL, *args], capture_output=True, timeout=30)
    if r.returncode != 0:
        raise Failure(f"slicectl {' '.join(args)} exited {r.returncode}: {r.stderr.decode()}")
    return r.stdout


def api(base, path, **params):
    """Prometheus's answer's data; a refused query raises Failure with Prometheus's reason."""
    url = f"{base}{path}?{urllib.parse.urlencode(params)}"
    try:
        with HTTP.open(url, timeout=10) as r:
            body = json.load(r)
    except urllib.error.HTTPError as e:  # 400/422: a query Prometheus refuses, with its reason
        body = json.load(e)
    if body.get("status") != "success":
        raise Failure(f"Prometheus refused {params or path}: {body.get('error')}")
    return body["data"]


def query(base, expr):
    return api(base, "/api/v1/query", query=expr)["result"]


def wait_for(what, ready, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        reason = ready()
        if reason is None:
            return
        if time.monotonic() > deadline:
            raise Failure(f"{what}: not within {timeout} s ({reason})")
        time.sleep(0.25)


def expand(expr, template_names):
    """The expression with Grafana's variables replaced (BUILTINS, template variables -> .*)."""
    def value(m):
        name = m.group(1) or m.group(2) or m.group(3)
        if name in BUILTINS:
            return BUILTINS[name]
        if name in template_names:
            return ".*"
        raise Failure(f"unknown variable ${name} in {expr}")
    return VARIABLE.sub(value, expr)


def all_panels(panels):
    """Every panel, those inside rows (a collapsed row holds its panels) included."""
    for p in panels:
        yield p
        yield from all_panels(p.get("panels", []))


def check_dashboard(base):
    """Every query of the dashboard against the live Prometheus; the list of what failed."""
    with open(DASHBOARD) as f:
        dashboard = json.load(f)
    variables = dashboard["templating"]["list"]
    names = {v["name"] for v in variables if v["type"] != "datasource"}
    datasource = {f"${{{v['name']}}}" for v in variables if v["type"] == "datasource"}
    failures, queries = [], 0

    def evaluate(where, expr, label=None):
        nonlocal queries
        queries += 1
        try:
            result = query(base, expand(expr, names))
        except Failure as e:
            failures.append(f"{where}: {e}")
            return
        if label:
            result = [r for r in result if label in r["metric"]]
        print(f"{'ok  ' if result else 'FAIL'}  {where}: {len(result)} series  {expr}")
        if not result:
            failures.append(f"{where}: no data for {expand(expr, names)}")

    # Variables: label_values(SELECTOR, LABEL) must list something.
    for v in variables:
        if v["type"] != "query":
            continue
        q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\)\s*", q)
        if not m:
            failures.append(f"variable ${v['name']}: not label_values(SELECTOR, LABEL): {q}")
            continue
        evaluate(f"variable ${v['name']}", m.group(1), label=m.group(2))
    for panel in all_panels(dashboard["panels"]):
        if panel["type"] == "row":
            continue
        where = f"panel '{panel['title']}'"
        # Panels follow the dashboard's data source variable, so the dashboard imports anywhere.
        for ref in [panel] + panel.get("targets", []):
            if ref.get("datasource", {}).get("uid") not in datasource:
                failures.append(f"{where}: its data source is {ref.get('datasource')}, not the dashboard's variable")
        exprs = [t["expr"] for t in panel.get("targets", []) if t.get("expr")]
        if not exprs and panel["type"] != "text":
            failures.append(f"{where}: no query")
        for expr in exprs:
            evaluate(where, expr)
    if queries < 10:
        failures.append(f"only {queries} queries found in {DASHBOARD}: was the dashboard read right?")
    return failures


def main():
    if not TMP:
        sys.exit("run through tests/run_isolated.sh (SLICE_TEST_TMPDIR is not set)")
    missing = [tool for tool in ("prometheus", "promtool") if not shutil.which(tool)]
    if missing:
        print(f"SKIP: {' and '.join(missing)} not installed "
              "(Debian: apt-get install prometheus; scripts/setup.sh does)")
        return SKIPPED
    # SIGTERM (CTest stopping the test) runs the cleanup below too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))
    started = []
    try:
        # The tenant: a real program under libslice, holding memory under its cap and busy, so
        # that every figure (device time received included) has a sample.
        env = dict(os.environ, LD_PRELOAD=LIBSLICE, LD_LIBRARY_PATH=SIMGPU_LIB_DIR, SLICE_TENANT=TENANT,
                   SLICE_MEMORY_LIMIT=str(CAP), SLICE_COMPUTE_SHARE=str(SHARE), SIMGPU_MEMORY="8Gi")
        log = os.path.join(TMP, "tenant.log")
        tenant = start([SIMGPU_LOAD, "--seconds", "300", "--kernel-us", "1000", "--alloc-mib", str(HELD_MIB)], log, env)
        started.append(tenant)
        if first_line(tenant, "simgpu-load under libslice", log) != "ready":
            raise Failure(f"simgpu-load did not start: {tail(log)}")

        # promtool's lint: exit 0 and nothing to say, or the problems it found.
        exposition = slicectl("metrics")
        lint = subprocess.run(["promtool", "check", "metrics"], input=exposition, capture_output=True, timeout=30)
        said = (lint.stdout + lint.stderr).decode().strip()
        print(f"promtool check metrics: exit {lint.returncode}" + (f"\n{said}" if said else ", nothing to report"))
        if lint.returncode != 0:
            raise Failure(f"promtool check metrics failed: {said}")

        log = os.path.join(TMP, "slicectl.log")
        exporter = start([SLICECTL, "metrics", "--listen", "127.0.0.1:0"], log)
        started.append(exporter)
        line = first_line(exporter, "slicectl metrics --listen", log)
        m = re.fullmatch(r"listening on http://(127\.0\.0\.1:\d+)/metrics", line)
        if not m:
            raise Failure(f"slicectl metrics --listen said {line!r}")
        target = m.group(1)

        # Prometheus: scrapes only that target, keeps its data in the temporary folder, and is not
        # told of any proxy.
        config = os.path.join(TMP, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    f"scrape_configs:\n  - job_name: libslice\n    static_configs:\n      - targets: ['{target}']\n")
        listen = f"127.0.0.1:{free_port()}"
        base = f"http://{listen}"
        log = os.path.join(TMP, "prometheus.log")
        quiet = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
        prometheus = start(["prometheus", f"--config.file={config}", f"--storage.tsdb.path={TMP}/tsdb",
                            f"--web.listen-address={listen}", "--log.level=warn"], log, quiet)
        started.append(prometheus)

        def target_up():
            if prometheus.poll() is not None:
                raise Failure(f"prometheus exited {prometheus.returncode}: {tail(log)}")
            try:
                targets = api(base, "/api/v1/targets")["activeTargets"]
            except (OSError, Failure) as e:
                return f"Prometheus not answering: {e}"
            if not targets or targets[0]["health"] != "up":
                return f"target {targets and targets[0]['health']}: {targets and targets[0]['lastError']}"
            # Three scrapes at least: rate() and increase() need two samples in their window.
            n = query(base, 'count_over_time(up{job="libslice"}[1m])')
            return None if n and float(n[0]["value"][1]) >= 3 else "fewer than 3 scrapes yet"
        start_wait = time.monotonic()
        wait_for("Prometheus scraping slicectl", target_up)
        print(f"Prometheus scraped {target} three times after {time.monotonic() - start_wait:.1f} s")

        # The series carry what slicectl status --json says, and that is what the tenant asked for.
        status = json.loads(slicectl("status", "--json"))
        device = status["devices"][0]
        t = next(t for t in device["tenants"] if t["name"] == TENANT)
        expected = {
            "slice_tenant_memory_used_bytes": (t["memory_used_bytes"], HELD_MIB * MiB),
            "slice_tenant_memory_cap_bytes": (t["memory_limit_bytes"], CAP),
            "slice_tenant_compute_share_ratio": (t["compute_share"] / 100, SHARE / 100),
            "slice_tenant_processes": (len(t["processes"]), 1),
        }
        failures = []
        for name, (shown, asked) in expected.items():
            series = query(base, f'{name}{{job="libslice", tenant="{TENANT}", uuid="{device["uuid"]}"}}')
            got = [float(s["value"][1]) for s in series]
            ok = got == [shown] and shown == asked
            print(f"{'ok  ' if ok else 'FAIL'}  {name}: Prometheus {got}, status --json {shown}, asked {asked}")
            if not ok:
                failures.append(f"{name}: Prometheus has {got}, status --json {shown}, the tenant asked {asked}")
        total = query(base, f'slice_device_memory_total_bytes{{uuid="{device["uuid"]}"}}')
        if [float(s["value"][1]) for s in total] != [device["total_bytes"]]:
            failures.append(f"slice_device_memory_total_bytes: Prometheus {total}, status {device['total_bytes']}")

        failures += check_dashboard(base)
        if failures:
            print("FAILED:\n  " + "\n  ".join(failures))
            return 1
        print("all dashboard queries answered; the figures are status --json's")
        return 0
    except Failure as e:
        print(f"FAILED: {e}")
        return 1
    finally:
        for proc in reversed(started):
            stop(proc)


if __name__ == "__main__":
    sys.exit(main())
