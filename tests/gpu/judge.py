#!/usr/bin/env python3
"""tests/gpu/run.sh's judgements of what its programs printed, kept apart from the shell so that
`run.sh --dry-run` can feed each one made-up figures (`judge.py selftest`) and catch a broken
judgement without a GPU. Each subcommand prints one or more lines, the verdict last, and exits 0
(holds), 1 (does not) or 3 (nothing to judge: SKIP).

  judge.py shares A_OUT B_OUT KERNEL_US KIND FIGURES     spin_share busy outputs of the 30% and
                                                         70% tenants: the 30% tenant's part of the
                                                         device time is 0.30 +- 0.05
  judge.py calls WITHOUT WITH FIGURES                    bench_calls outputs, medians compared
  judge.py cpu WITHOUT WITH SECONDS FIGURES              spin_share busy outputs: CPU per process
  judge.py plugin-list LISTING SMI_CSV SLICES            slice-device-plugin --list vs nvidia-smi
  judge.py status-json STATUS_JSON                       slicectl status --json lists devices
  judge.py tenant-seconds STATUS_JSON TENANT             the tenant's device seconds, > 0
  judge.py result-why LOG                                the "why" of a framework check's RESULT
  judge.py selftest                                      all of the above on made-up inputs
"""
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile


def values(path, key):
    """Every KEY=value of a key=value output, as floats."""
    out = []
    for line in open(path, errors="replace"):
        if line.startswith(key + "="):
            try:
                out.append(float(line.split("=", 1)[1].split()[0]))
            except (ValueError, IndexError):
                pass
    return out


def one(path, key):
    found = values(path, key)
    if not found:
        raise ValueError(f"no {key}= in {os.path.basename(path)}")
    return found[-1]


def add_figures(path, rows):
    if path:
        with open(path, "a") as f:
            for row in rows:
                f.write("\t".join(str(x) for x in row) + "\n")


def shares(a_out, b_out, kernel_us, kind, figures, expect=0.30, tolerance=0.05):
    try:
        a, b = one(a_out, "device_s"), one(b_out, "device_s")
        window = one(a_out, "window_s")
        late = [one(p, "late_ms") for p in (a_out, b_out)]
    except (OSError, ValueError) as e:
        print(f"shares: {e}")
        return 1
    share = a / (a + b) if a + b else 0.0
    add_figures(figures, [("shares", f"30/70 {kernel_us} us {kind}: 30% tenant", f"{share:.3f}", "of the device")])
    ok = abs(share - expect) <= tolerance
    print(f"30/70 with {kernel_us} us kernels ({kind}): {a:.3f} s / {b:.3f} s of device time in {window:g} s "
          f"(busy {(a + b) / window:.2f}; began {late[0]:.1f} and {late[1]:.1f} ms late): the 30% tenant got "
          f"{share:.3f} (wanted {expect:.2f} +- {tolerance:.2f})")
    return 0 if ok else 1


def calls(without, with_, figures):
    lines = []
    try:
        for key, label in (("launch_ns", "cuLaunchKernel"), ("alloc_free_ns", "cuMemAlloc + cuMemFree")):
            a, b = statistics.median(values(without, key)), statistics.median(values(with_, key))
            lines.append((label, a, b))
    except (OSError, statistics.StatisticsError) as e:
        print(f"calls: no figures ({type(e).__name__}: {e})")
        return 1
    for label, a, b in lines:
        print(f"{label}: {a:.0f} ns without, {b:.0f} ns with libslice: {b - a:+.0f} ns")
        add_figures(figures, [("per call", f"{label}: without", f"{a:.0f}", "ns"),
                              ("per call", f"{label}: with libslice", f"{b:.0f}", "ns")])
    return 0


def cpu(without, with_, seconds, figures):
    for side, path in (("without", without), ("with", with_)):
        try:
            c = (one(path, "cpu_user_s") + one(path, "cpu_sys_s")) / float(seconds) * 100
        except (OSError, ValueError) as e:
            print(f"cpu: {e}")
            return 1
        print(f"busy process, {side} libslice: {c:.1f}% of a core")
        add_figures(figures, [("cpu", f"busy process, {side} libslice", f"{c:.1f}", "% of a core")])
    return 0


def plugin_list(listing_path, smi_csv, slices):
    slices = int(slices)
    listing = open(listing_path, errors="replace").read()
    gpus = [[x.strip() for x in l.split(",")] for l in open(smi_csv).read().splitlines() if l.strip()]
    ids = re.findall(r"^  (\S+)$", listing, re.M)
    problems = []
    if not gpus:
        problems.append("nvidia-smi listed no GPU")
    if len(ids) != slices * len(gpus):
        problems.append(f"{len(ids)} slices for {len(gpus)} GPUs")
    for uuid, mib in gpus:
        if [f"{uuid}::{k}" for k in range(slices)] != [i for i in ids if i.startswith(uuid)]:
            problems.append(f"the slice IDs of {uuid} are not {uuid}::0..{slices - 1}")
        m = re.search(re.escape(uuid) + r" .*?: (\d+) bytes, " + str(slices) + r" slices of (\d+) bytes", listing)
        if not m:
            problems.append(f"no memory line for {uuid}")
            continue
        total, per_slice = int(m.group(1)), int(m.group(2))
        if abs(total // 2**20 - int(mib)) > 1:
            problems.append(f"{uuid}: {total} bytes, nvidia-smi says {mib} MiB")
        if per_slice != total // slices // 2**20 * 2**20:
            problems.append(f"{uuid}: slices of {per_slice} bytes, not a whole-MiB {slices}th of {total}")
    if problems:
        print("device plugin: " + "; ".join(problems))
        return 1
    print(f"{len(ids)} slices on {len(gpus)} GPUs: IDs, UUIDs and memory per slice match nvidia-smi")
    return 0


def status_json(path):
    try:
        d = json.load(open(path))
        devices = d["devices"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"slicectl status --json: unreadable ({type(e).__name__}: {e})")
        return 1
    tenants = sorted({t["name"] for dev in devices for t in dev.get("tenants", [])})
    print(f"{len(devices)} devices and {len(tenants)} tenants in slicectl status --json"
          + (f"; warnings: {d['warnings']}" if d.get("warnings") else ""))
    return 0 if devices else 1


def tenant_seconds(path, tenant):
    try:
        d = json.load(open(path))
        found = [t for dev in d["devices"] for t in dev.get("tenants", []) if t["name"] == tenant]
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"slicectl status --json: unreadable ({type(e).__name__}: {e})")
        return 1
    if not found:
        print(f"tenant {tenant} is not in slicectl status --json: libslice never saw it")
        return 1
    seconds = sum(float(t.get("device_seconds_total") or 0) for t in found)
    print(f"tenant {tenant}: {seconds:.3f} device seconds in slicectl status --json")
    return 0 if seconds > 0 else 1


def result_why(log):
    rows = [l for l in open(log, errors="replace") if l.startswith("RESULT {")]
    if not rows:
        return 1
    try:
        r = json.loads(rows[-1][len("RESULT "):])
    except ValueError:
        return 1
    print(f"{r.get('status', '?')}: {r.get('why', '')}".replace("\t", " ").replace("\n", " ")[:300])
    return 0


# ----------------------------------------------------------------------------------------------

def selftest():
    """Each judgement on made-up inputs, with the verdict it must give."""
    here = os.path.dirname(os.path.abspath(__file__))
    lm = os.path.join(here, "frameworks", "transformers_shares.py")
    failures = []
    with tempfile.TemporaryDirectory() as d:
        def write(name, text):
            path = os.path.join(d, name)
            with open(path, "w") as f:
                f.write(text)
            return path

        def busy(name, device_s, late=3.0):
            return write(name, f"late_ms={late}\nkernels=1\ndevice_s={device_s}\nwindow_s=4.000\n"
                               "cpu_user_s=0.5\ncpu_sys_s=0.25\n")

        def expect(label, got, want):
            if got != want:
                failures.append(f"{label}: exit {got}, wanted {want}")

        figures = os.path.join(d, "figures.tsv")
        expect("shares 0.30", shares(busy("a1", 1.2), busy("b1", 2.8), 1000, "plain", figures), 0)
        expect("shares 0.50", shares(busy("a2", 2.0), busy("b2", 2.0), 1000, "graph", figures), 1)
        expect("shares without figures", shares(write("a3", "error=late\n"), busy("b3", 1), 100, "plain", None), 1)
        w = write("without", "launch_ns=2000\nalloc_free_ns=5000\n" * 3)
        expect("calls", calls(w, write("with", "launch_ns=2100\nalloc_free_ns=5600\n" * 3), figures), 0)
        expect("calls, nothing measured", calls(w, write("empty", ""), figures), 1)
        expect("cpu", cpu(busy("c1", 1), busy("c2", 1), 5, figures), 0)
        uuid = "GPU-11111111-2222-3333-4444-555555555555"
        total = 143771 * 2**20
        per = total // 4 // 2**20 * 2**20
        listing = (f"GPU 0 {uuid} NVIDIA H200: {total} bytes, 4 slices of {per} bytes and 25%\n"
                   + "".join(f"  {uuid}::{k}\n" for k in range(4)))
        smi = write("smi.csv", f"{uuid}, 143771\n")
        expect("plugin-list", plugin_list(write("list", listing), smi, 4), 0)
        expect("plugin-list, 3 slices", plugin_list(write("list3", listing.replace(f"  {uuid}::3\n", "")), smi, 4), 1)
        status = {"devices": [{"index": 0, "uuid": uuid, "tenants": [
            {"name": "torch-graph", "device_seconds_total": 1.25}, {"name": "idle", "device_seconds_total": 0}]}],
            "warnings": []}
        sj = write("status.json", json.dumps(status))
        expect("status-json", status_json(sj), 0)
        expect("status-json, no devices", status_json(write("none.json", '{"devices": []}')), 1)
        expect("tenant-seconds", tenant_seconds(sj, "torch-graph"), 0)
        expect("tenant-seconds, idle", tenant_seconds(sj, "idle"), 1)
        expect("tenant-seconds, absent", tenant_seconds(sj, "nobody"), 1)
        expect("result-why", result_why(write("py.log", 'x\nRESULT {"check": "c", "status": "skip", "why": "no jax"}\n')), 0)
        expect("result-why, none", result_why(write("plain.log", "PASS\n")), 1)

        # The transformers protocol: a plan from two ready files, then the judge's three verdicts.
        ra = write("ready-a", json.dumps({"call_s": 0.4}))
        rb = write("ready-b", json.dumps({"call_s": 0.6}))
        plan_path = os.path.join(d, "plan")
        rc = subprocess.run([sys.executable, lm, "--make-plan", ra, rb, "--plan-out", plan_path],
                            capture_output=True, text=True).returncode
        expect("transformers --make-plan", rc, 0)
        try:
            plan = json.load(open(plan_path))
            (k1, a1, a2), (k2, j1, j2) = plan["windows"]["a"]
            (k3, b1, b2), (k4, j3, j4) = plan["windows"]["b"]
            if not (k1 == k3 == "solo" and k2 == k4 == "joint" and a2 + 0.9 < b1 and b2 + 0.9 < j1
                    and (j1, j2) == (j3, j4) and j2 - j1 >= 12 and a2 - a1 >= 4):
                failures.append(f"transformers plan: windows out of order or too short: {plan['windows']}")
        except (OSError, ValueError, KeyError) as e:
            failures.append(f"transformers plan unreadable: {e}")

        def lm_result(name, solo, joint):
            return write(name, "warm-up\nRESULT " + json.dumps(
                {"check": name, "status": "pass", "why": "", "solo_tokens_per_s": solo, "joint_tokens_per_s": joint}) + "\n")

        for label, a, b, want in (("contended, 0.30", (1000, 300), (1000, 700), 0),
                                  ("contended, 0.50", (1000, 500), (1000, 500), 1),
                                  ("not contended", (1000, 950), (1000, 980), 3),
                                  ("no RESULT", None, (1000, 500), 1)):
            pa = lm_result("lm-a", *a) if a else write("lm-a", "Traceback\n")
            pb = lm_result("lm-b", *b)
            rc = subprocess.run([sys.executable, lm, "--judge", pa, pb, "--figures", figures],
                                capture_output=True, text=True).returncode
            expect(f"transformers --judge, {label}", rc, want)
        rows = [l.split("\t") for l in open(figures).read().splitlines()]
        if any(len(r) != 4 for r in rows) or len(rows) < 10:
            failures.append(f"figures.tsv: {len(rows)} rows, some not of 4 fields")
    for f in failures:
        print(f"judge selftest: {f}")
    print(f"judge selftest: {'every judgement gave the verdict wanted' if not failures else f'{len(failures)} wrong'}"
          " (shares, calls, cpu, plugin list, status JSON, tenant seconds, RESULT why, transformers plan and judge)")
    return 1 if failures else 0


def main(argv):
    commands = {
        "shares": (5, lambda a: shares(a[0], a[1], a[2], a[3], a[4])),
        "calls": (3, lambda a: calls(*a)),
        "cpu": (4, lambda a: cpu(*a)),
        "plugin-list": (3, lambda a: plugin_list(*a)),
        "status-json": (1, lambda a: status_json(*a)),
        "tenant-seconds": (2, lambda a: tenant_seconds(*a)),
        "result-why": (1, lambda a: result_why(*a)),
        "selftest": (0, lambda a: selftest()),
    }
    if len(argv) < 2 or argv[1] not in commands or len(argv) - 2 != commands[argv[1]][0]:
        print(__doc__, file=sys.stderr)
        return 2
    return commands[argv[1]][1](argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
