#!/usr/bin/env python3
"""tests/gpu/run.sh's judgements of what its programs printed, kept apart from the shell so that
`run.sh --dry-run` can feed each one made-up figures (`judge.py selftest`) and catch a broken
judgement without a GPU. Each subcommand prints one or more lines, the verdict last, and exits 0
(holds), 1 (does not) or 3 (nothing to judge: SKIP).

  judge.py shares A_OUT B_OUT KERNEL_US KIND FIGURES     spin_share busy outputs of the 30% and
                                                         70% tenants: the 30% tenant's part of the
                                                         device time is 0.30 +- 0.05
  judge.py calls WITHOUT WITH FIGURES                    bench_calls outputs (one figure per process,
                                                         alternately without and with): each side's
                                                         median and quartiles, the difference of the
                                                         medians and its 90% interval
  judge.py syscalls WITHOUT WITH N NAMES FIGURES         syscount reports of bench_calls --count N:
                                                         system calls per launch and per alloc+free
                                                         pair, and those libslice adds, by name
  judge.py syscount-probe REPORT PROBE_OUT EXIT          syscount's report of its own probe: exact
                                                         counts, or the counter is broken
  judge.py cpu WITHOUT WITH SECONDS FIGURES              spin_share busy outputs: CPU per process
  judge.py plugin-list LISTING SMI_CSV SLICES            slice-device-plugin --list vs nvidia-smi
  judge.py status-json STATUS_JSON                       slicectl status --json lists devices
  judge.py tenant-seconds STATUS_JSON TENANT             the tenant's device seconds, > 0
  judge.py result-why LOG                                the "why" of a framework check's RESULT
  judge.py selftest                                      all of the above on made-up inputs
"""
import json
import os
import random
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


def limit(out, expect, figures, tolerance=0.05):
    """A tenant alone under a hard limit: the device time it got over its window (issue 26)."""
    try:
        device, window = one(out, "device_s"), one(out, "window_s")
    except (OSError, ValueError) as e:
        print(f"limit: {e}")
        return 1
    got = device / window if window else 0.0
    add_figures(figures, [("limit", f"hard limit {float(expect):.2f}, cooperative launches", f"{got:.3f}", "of the device")])
    ok = abs(got - float(expect)) <= tolerance
    print(f"alone under a hard limit of {float(expect):.2f}: {device:.3f} s of device time in {window:g} s = {got:.3f} "
          f"(wanted {float(expect):.2f} +- {tolerance:.2f})")
    return 0 if ok else 1


def spread(xs):
    """(median, first quartile, third quartile, min, max) of a sample."""
    xs = sorted(xs)
    q1, q3 = (xs[0], xs[0]) if len(xs) == 1 else statistics.quantiles(xs, n=4, method="inclusive")[::2]
    return statistics.median(xs), q1, q3, xs[0], xs[-1]


def difference_interval(a, b, resamples=2000, seed=1):
    """A 90% interval of median(b) - median(a), each side resampled on its own (bootstrap). Seeded, so
    that the figures can be made again from a run's logs."""
    rng = random.Random(seed)
    d = sorted(statistics.median(rng.choices(b, k=len(b))) - statistics.median(rng.choices(a, k=len(a)))
               for _ in range(resamples))
    return d[int(0.05 * resamples)], d[int(0.95 * resamples) - 1]


def calls(without, with_, figures):
    """Each bench_calls process printed one median per call kind; the processes ran alternately
    without and with libslice, so that a drift of the machine falls on both sides. The spread between
    processes of one side is the noise a difference must stand out of."""
    lines = []
    try:
        for key, label in (("launch_ns", "cuLaunchKernel"), ("alloc_free_ns", "cuMemAlloc + cuMemFree")):
            a, b = values(without, key), values(with_, key)
            lines.append((label, a, b, spread(a), spread(b)))
    except (OSError, ValueError, statistics.StatisticsError) as e:
        print(f"calls: no figures ({type(e).__name__}: {e})")
        return 1
    verdicts = []
    for label, a, b, sa, sb in lines:
        lo, hi = difference_interval(a, b)
        added = sb[0] - sa[0]
        noise = "within the noise" if lo <= 0 <= hi else "outside the noise"
        print(f"{label}, {len(a)} processes without and {len(b)} with libslice, alternately: "
              f"without {sa[0]:.0f} ns (quartiles {sa[1]:.0f}..{sa[2]:.0f}, range {sa[3]:.0f}..{sa[4]:.0f}), "
              f"with {sb[0]:.0f} ns (quartiles {sb[1]:.0f}..{sb[2]:.0f}, range {sb[3]:.0f}..{sb[4]:.0f}); "
              f"difference of the medians {added:+.0f} ns, 90% interval {lo:+.0f}..{hi:+.0f}: {noise}")
        verdicts.append(f"{label} {added:+.0f} ns ({lo:+.0f}..{hi:+.0f}, {noise})")
        add_figures(figures, [
            ("per call", f"{label}: without", f"{sa[0]:.0f}", f"ns (median of {len(a)} processes)"),
            ("per call", f"{label}: without, quartiles", f"{sa[1]:.0f}..{sa[2]:.0f}", "ns"),
            ("per call", f"{label}: with libslice", f"{sb[0]:.0f}", f"ns (median of {len(b)} processes)"),
            ("per call", f"{label}: with libslice, quartiles", f"{sb[1]:.0f}..{sb[2]:.0f}", "ns"),
            ("per call", f"{label}: added by libslice", f"{added:+.0f}", "ns (difference of the medians)"),
            ("per call", f"{label}: added, 90% interval", f"{lo:+.0f}..{hi:+.0f}", "ns (bootstrap)")])
    print("added by libslice: " + "; ".join(verdicts))
    return 0


# bench_calls --count's phases (phase_marker.h): what each counts.
PHASES = {0: "start-up", 1: "launches", 2: "synchronize", 3: "alloc+free pairs", 4: "end"}


def read_syscount(path):
    """A syscount report: ({key: value}, {(phase, "main"|"other"): {number: count}})."""
    facts, calls = {}, {}
    for line in open(path, errors="replace"):
        parts = line.split()
        if len(parts) == 5 and parts[0] == "calls":
            calls.setdefault((int(parts[1]), parts[2]), {})[int(parts[3])] = int(parts[4])
        elif "=" in line:
            key, value = line.rstrip("\n").split("=", 1)
            facts[key] = value
    return facts, calls


def syscall_names(path):
    """{number: name} from run.sh's table (NUMBER<tab>NAME, from <sys/syscall.h>); {} without one."""
    names = {}
    try:
        for line in open(path):
            nr, name = line.split("\t")
            names[int(nr)] = name.strip()
    except (OSError, ValueError):
        pass
    return names


def counted(calls, phase, who, nr=None):
    c = calls.get((phase, who), {})
    return sum(c.values()) if nr is None else c.get(nr, 0)


def syscalls(without, with_, n, names_path, figures):
    """System calls of the thread that makes the calls (the program's first), per call, without and
    with libslice; other threads' are reported as they are (they follow time, not calls)."""
    n = int(n)
    names = syscall_names(names_path)
    reports = {}
    for side, path in (("without", without), ("with", with_)):
        try:
            facts, calls = read_syscount(path)
        except (OSError, ValueError) as e:
            print(f"syscalls: no report {side} libslice ({type(e).__name__}: {e})")
            return 1
        if "unsupported" in facts:
            print(f"syscalls: system calls cannot be counted here: {facts['unsupported']}")
            return 3
        if facts.get("exit_status") != "0":
            print(f"syscalls: bench_calls --count {n} {side} libslice ended with exit status "
                  f"{facts.get('exit_status', 'unknown')}")
            return 1
        if facts.get("markers") != str(len(PHASES) - 1):
            print(f"syscalls: {facts.get('markers', 'no')} phase markers {side} libslice, not {len(PHASES) - 1}: "
                  "the counts cannot be told apart by phase")
            return 1
        reports[side] = calls
    a, b = reports["without"], reports["with"]

    def most(phase, per):
        nrs = set(a.get((phase, "main"), {})) | set(b.get((phase, "main"), {}))
        added = sorted(((counted(b, phase, "main", nr) - counted(a, phase, "main", nr)) / per, nr) for nr in nrs)
        top = [(d, nr) for d, nr in reversed(added) if d > 0][:4] + [(d, nr) for d, nr in added if d < 0][:2]
        return ", ".join(f"{names.get(nr, f'#{nr}')} {d:+.3g}" for d, nr in top) or "none"

    rows, verdict = [], []
    for phase, label, per in ((0, "at start-up (context, module, warm-up)", 1), (1, "per cuLaunchKernel", n),
                              (2, f"in cuStreamSynchronize (after the {n} launches)", 1),
                              (3, "per cuMemAlloc + cuMemFree", n)):
        x, y = counted(a, phase, "main") / per, counted(b, phase, "main") / per
        digits = 3 if per > 1 else 0
        others = f"; other threads {counted(a, phase, 'other')} without, {counted(b, phase, 'other')} with" \
            if phase else ""
        print(f"system calls {label}: {x:.{digits}f} without, {y:.{digits}f} with libslice "
              f"({y - x:+.{digits}f}: {most(phase, per)}){others}")
        short = label.split(" (")[0]
        rows += [("system calls", f"{short}: without", f"{x:.{digits}f}", "calls"),
                 ("system calls", f"{short}: with libslice", f"{y:.{digits}f}", "calls"),
                 ("system calls", f"{short}: added by libslice, most", most(phase, per), "calls")]
        if phase:
            rows.append(("system calls", f"{short}: other threads, without / with",
                         f"{counted(a, phase, 'other')} / {counted(b, phase, 'other')}", "calls in the phase"))
        if per > 1:
            verdict.append(f"{short} {y - x:+.3f}")
        elif phase == 0:
            verdict.append(f"{y - x:+.0f} at start-up")
    add_figures(figures, rows)
    print(f"system calls added by libslice on the calling thread ({n} of each): " + "; ".join(verdict))
    return 0


def syscount_probe(report, probe_out, exit_status):
    """syscount's count of its own probe (syscount --probe N), whose system calls are known."""
    try:
        facts, calls = read_syscount(report)
        if "unsupported" in facts:
            print(f"syscount: cannot count here: {facts['unsupported']}")
            return 3
        n, getppid, getuid = (int(one(probe_out, k)) for k in ("probe_n", "getppid_nr", "getuid_nr"))
    except (OSError, ValueError) as e:
        print(f"syscount probe: {type(e).__name__}: {e}")
        return 1
    wrong = []
    for what, got, want in (
            ("getppid on the first thread in phase 1", counted(calls, 1, "main", getppid), n),
            ("getuid on the first thread in phase 1", counted(calls, 1, "main", getuid), n // 2),
            ("all calls of the first thread in phase 1", counted(calls, 1, "main"), n + n // 2),
            ("calls of other threads in phase 1", counted(calls, 1, "other"), 0),
            ("getppid on the second thread in phase 2", counted(calls, 2, "other", getppid), n),
            ("getppid on the first thread in phase 2", counted(calls, 2, "main", getppid), 0),
            ("phase markers", facts.get("markers"), "3"),
            ("the probe's exit status in the report (7: its signal arrived)", facts.get("exit_status"), "7"),
            ("syscount's own exit status", str(exit_status), "7")):
        if got != want:
            wrong.append(f"{what}: {got}, not {want}")
    if counted(calls, 0, "main") == 0:
        wrong.append("nothing counted before the first marker (the exec and the start-up)")
    if counted(calls, 3, "main") < 2:
        wrong.append("fewer than 2 calls in phase 3 (the signal sent, and the return from its handler)")
    if int(facts.get("threads", 0)) < 2:
        wrong.append(f"threads={facts.get('threads')}: the second thread was not followed")
    if wrong:
        print("syscount miscounts its probe: " + "; ".join(wrong))
        return 1
    print(f"syscount counts its probe exactly ({facts.get('method')}): {n} getppid and {n // 2} getuid on the "
          f"first thread, {n} getppid on a second, 3 phase markers, the signal passed on, exit status 7")
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
        expect("limit 0.40 held", limit(busy("l1", 1.6), "0.40", figures), 0)
        expect("limit 0.40 passed", limit(busy("l2", 2.4), "0.40", figures), 1)
        w = write("without", "launch_ns=2000\nalloc_free_ns=5000\n" * 3)
        expect("calls", calls(w, write("with", "launch_ns=2100\nalloc_free_ns=5600\n" * 3), figures), 0)
        expect("calls, nothing measured", calls(w, write("empty", ""), figures), 1)
        # The first real run's figures: two processes each way, a difference inside the noise.
        w2 = write("without2", "launch_ns=3950\nalloc_free_ns=75776\nlaunch_ns=4412\nalloc_free_ns=89160\n")
        h2 = write("with2", "launch_ns=3501\nalloc_free_ns=60807\nlaunch_ns=4126\nalloc_free_ns=84424\n")
        got = subprocess.run([sys.executable, __file__, "calls", w2, h2, ""], capture_output=True, text=True)
        expect("calls, in the noise", got.returncode, 0)
        if "cuLaunchKernel -368 ns (-911..+176, within the noise)" not in got.stdout:
            failures.append(f"calls: the first run's figures are not judged within the noise: {got.stdout!r}")
        if spread([4, 1, 3, 2, 5]) != (3, 2, 4, 1, 5) or spread([7]) != (7, 7, 7, 7, 7):
            failures.append(f"spread: {spread([4, 1, 3, 2, 5])}, {spread([7])}")
        far = difference_interval([100, 101, 99, 100], [200, 201, 199, 200])
        if not 98 <= far[0] <= far[1] <= 102:
            failures.append(f"difference_interval of two apart samples: {far}")

        # syscount: reports of bench_calls --count 1000 and of the probe.
        names = write("names.tsv", "0\tread\n16\tioctl\n110\tgetppid\n102\tgetuid\n228\tclock_gettime\n")

        def report(extra="", markers=4, status=0):
            head = f"method=syscall-info\nthreads=3\nmarkers={markers}\nexit_status={status}\n"
            return head + "calls 0 main 16 900\ncalls 1 main 16 10\ncalls 3 main 16 4000\ncalls 1 other 0 5\n" + extra

        sw = write("sc-without", report())
        sh = write("sc-with", report("calls 0 main 0 300\ncalls 1 main 228 2000\ncalls 3 main 228 1000\n"))
        got = subprocess.run([sys.executable, __file__, "syscalls", sw, sh, "1000", names, figures],
                             capture_output=True, text=True)
        expect("syscalls", got.returncode, 0)
        for want in ("per cuLaunchKernel: 0.010 without, 2.010 with libslice (+2.000: clock_gettime +2)",
                     "per cuMemAlloc + cuMemFree: 4.000 without, 5.000 with libslice (+1.000: clock_gettime +1)",
                     "at start-up (context, module, warm-up): 900 without, 1200 with libslice (+300: read +300)"):
            if want not in got.stdout:
                failures.append(f"syscalls: no {want!r} in {got.stdout!r}")
        untraced = write("sc-no", "unsupported=ptrace refused\n")
        expect("syscalls, not traceable", syscalls(untraced, sh, 1000, names, None), 3)
        expect("syscalls, markers missing", syscalls(sw, write("sc-m", report(markers=0)), 1000, names, None), 1)
        expect("syscalls, bench_calls failed", syscalls(sw, write("sc-f", report(status=1)), 1000, names, None), 1)
        probe = write("probe.out", "getppid_nr=110\ngetuid_nr=102\nprobe_n=1000\n")
        good = ("method=syscall-info\nthreads=2\nmarkers=3\nexit_status=7\ncalls 0 main 59 1\ncalls 1 main 102 500\n"
                "calls 1 main 110 1000\ncalls 2 other 110 1000\ncalls 2 other 202 1\ncalls 2 main 202 1\n"
                "calls 3 main 234 1\ncalls 3 main 15 1\n")
        expect("syscount-probe", syscount_probe(write("pr", good), probe, 7), 0)
        for label, text, status in (
                ("entries and exits counted", good.replace(" 1000\n", " 2000\n").replace(" 500\n", " 1000\n"), 7),
                ("the second thread not followed",
                 good.replace("calls 2 other 110 1000\n", "").replace("threads=2", "threads=1"), 7),
                ("markers not seen", good.replace("calls 1 main", "calls 0 main").replace("markers=3", "markers=0"), 7),
                ("the signal swallowed", good.replace("exit_status=7", "exit_status=8"), 8),
                ("the exit status lost", good, 0)):
            expect(f"syscount-probe, {label}", syscount_probe(write("pr-bad", text), probe, status), 1)
        expect("syscount-probe, unsupported", syscount_probe(write("pr-no", "unsupported=no ptrace\n"), probe, 125), 3)
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
          " (shares, calls, system calls, syscount's probe, cpu, plugin list, status JSON, tenant seconds, RESULT why,"
          " transformers plan and judge)")
    return 1 if failures else 0


def main(argv):
    commands = {
        "shares": (5, lambda a: shares(a[0], a[1], a[2], a[3], a[4])),
        "limit": (3, lambda a: limit(*a)),
        "calls": (3, lambda a: calls(*a)),
        "syscalls": (5, lambda a: syscalls(*a)),
        "syscount-probe": (3, lambda a: syscount_probe(*a)),
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
