"""Checks `slicectl status --json` (read from standard input) against the contract of
ARCHITECTURE.md part A, and prints it flattened, one line per device, tenant, process and warning,
for the C++ test to compare:

  device INDEX UUID "NAME" TOTAL USED
  tenant UUID NAME PRIORITY LIMIT|null USED SHARE LIMIT POLICY DEAD
  compute UUID NAME USED_1S|null USED_10S|null     (floats as Python's repr: 0.237, 1.0)
  usage UUID NAME DEVICE_SECONDS MEMORY_BYTE_SECONDS (cumulative, floats as Python's repr)
  process UUID TENANT PID "NAME" MEMORY
  warning "TEXT"

Text fields are printed as ASCII JSON strings. Exit status 1, with the reason, if anything is off.
"""
import json
import sys


def fail(why):
    print("bad status JSON: " + why, file=sys.stderr)
    sys.exit(1)


def need(obj, key, kinds, where):
    if not isinstance(obj, dict) or key not in obj:
        fail(f"{where}: missing key {key!r}")
    value = obj[key]
    # bool is an int in Python: numbers must not be booleans, booleans must be.
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        fail(f"{where}: {key!r} = {value!r} is not {kinds}")
    return value


def overhead_of(entry, used, where):
    """The reconciled overhead: part of the memory used, a number exactly when it was measured."""
    state = need(entry, "memory_overhead", (str,), where)
    if state not in ("measured", "not measured yet", "not measurable"):
        fail(f"{where}: memory_overhead {state!r}")
    overhead = need(entry, "memory_overhead_bytes", (int, type(None)), where)
    if (overhead is None) != (state != "measured"):
        fail(f"{where}: memory_overhead_bytes {overhead!r} with memory_overhead {state!r}")
    if overhead is not None and not 0 <= overhead <= used:
        fail(f"{where}: overhead {overhead} is not part of the {used} bytes used")


def main():
    raw = sys.stdin.buffer.read()
    try:
        doc = json.loads(raw.decode("utf-8"))  # strict: invalid UTF-8 fails here
    except (UnicodeDecodeError, ValueError) as e:
        fail(f"does not parse: {e}")
    devices = need(doc, "devices", (list,), "top")
    out = []
    uuids = []
    for i, d in enumerate(devices):
        where = f"devices[{i}]"
        if need(d, "index", (int,), where) != i:
            fail(f"{where}: index {d['index']} is not {i}")
        uuid = need(d, "uuid", (str,), where)
        uuids.append(uuid)
        name = need(d, "name", (str,), where)
        total = need(d, "total_bytes", (int,), where)
        used = need(d, "used_bytes", (int,), where)
        tenants = need(d, "tenants", (list,), where)
        out.append(f"device {i} {uuid} {json.dumps(name)} {total} {used}")
        tenant_sum = 0
        for k, t in enumerate(tenants):
            tw = f"{where}.tenants[{k}]"
            tname = need(t, "name", (str,), tw)
            priority = need(t, "priority", (str,), tw)
            if priority not in ("high", "normal", "low"):
                fail(f"{tw}: priority {priority!r}")
            limit = need(t, "memory_limit_bytes", (int, type(None)), tw)
            tused = need(t, "memory_used_bytes", (int,), tw)
            overhead_of(t, tused, tw)
            share = need(t, "compute_share", (int,), tw)
            climit = need(t, "compute_limit", (int,), tw)
            compute_used = []
            for key in ("compute_used_1s", "compute_used_10s"):
                value = need(t, key, (type(None), int, float), tw)
                if value is not None and not 0 <= value <= 1:
                    fail(f"{tw}: {key} = {value!r} is not a fraction 0..1")
                compute_used.append(value)
            if (compute_used[0] is None) != (compute_used[1] is None):
                fail(f"{tw}: compute_used_1s and compute_used_10s are measured together, got {compute_used}")
            if not (1 <= share <= 100 and 1 <= climit <= 100):
                fail(f"{tw}: share {share} / limit {climit} out of 1-100")
            metered = [need(t, key, (int, float), tw) for key in ("device_seconds_total", "memory_byte_seconds_total")]
            if any(v < 0 for v in metered):
                fail(f"{tw}: cumulative usage {metered} is negative")
            policy = need(t, "policy", (bool,), tw)
            dead = need(t, "dead_processes", (int,), tw)
            processes = need(t, "processes", (list,), tw)
            out.append(f"tenant {uuid} {tname} {priority} {'null' if limit is None else limit} {tused} "
                       f"{share} {climit} {str(policy).lower()} {dead}")
            out.append(f"compute {uuid} {tname} " + " ".join("null" if v is None else repr(float(v)) for v in compute_used))
            out.append(f"usage {uuid} {tname} " + " ".join(repr(float(v)) for v in metered))
            process_sum = 0
            for m, p in enumerate(processes):
                pw = f"{tw}.processes[{m}]"
                pid = need(p, "pid", (int,), pw)
                pname = need(p, "name", (str,), pw)
                pmem = need(p, "memory_used_bytes", (int,), pw)
                overhead_of(p, pmem, pw)
                process_sum += pmem
                out.append(f"process {uuid} {tname} {pid} {json.dumps(pname)} {pmem}")
            if process_sum != tused:
                fail(f"{tw}: processes hold {process_sum} bytes, the tenant says {tused}")
            tenant_sum += tused
        if tenant_sum != used:
            fail(f"{where}: tenants hold {tenant_sum} bytes, the device says {used}")
    if uuids != sorted(uuids):
        fail(f"devices are not in UUID order: {uuids}")
    for w in need(doc, "warnings", (list,), "top"):
        out.append(f"warning {json.dumps(w)}")
    print("\n".join(out))


main()
