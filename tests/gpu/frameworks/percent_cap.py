"""A cap given as a percentage of the device (SLICE_MEMORY_LIMIT=25%).

    python3 tests/gpu/frameworks/percent_cap.py [--reference driver|smi] [--allow-missing] [--timeout S]

Run under SLICE_MEMORY_LIMIT=N% (the orchestrator sets 25%). torch.cuda.mem_get_info() total must
be N% of the device's total memory, then one tensor of 90% of that total is allocated (and freed)
and one of 110% is refused with torch.cuda.OutOfMemoryError.

The device's total is read without libslice (children whose environment lacks LD_PRELOAD):
- the driver's cuDeviceTotalMem (cuda-bindings; torch's total_memory where cuda-bindings is absent),
  which is what libslice takes a percentage of (shim/session.cpp, libslice/config/quantity.cpp: the cap is
  floor(total x N / 100)): the default reference, compared exactly (within 1 MiB);
- nvidia-smi --query-gpu=memory.total (NVML's total, in MiB), reported as well. On many GPUs NVML's
  total is larger than the driver's cuDeviceTotalMem by a few hundred MiB, so N% of it differs from
  the cap by more than 1 MiB; --reference smi makes that the compared figure (within 1 MiB).
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_common as cc  # noqa: E402

FRACTION_DIGITS = 7  # libslice reads a percentage to 10^-7 % (a billionth of the device)


def billionths(percent_text):
    """The percentage as libslice holds it: billionths of the device, or None if not a percentage."""
    text = percent_text.strip()
    if not text.endswith("%"):
        return None
    number = text[:-1].strip()
    whole, _, frac = number.partition(".")
    if not whole.isdigit() or (frac and not frac.isdigit()) or len(frac) > FRACTION_DIGITS:
        return None
    return int(whole) * 10**FRACTION_DIGITS + int((frac or "0").ljust(FRACTION_DIGITS, "0"))


def device_total_child():
    """Runs in a child without LD_PRELOAD: prints the driver's total and UUID of device 0."""
    out = {}
    try:
        d = cc.import_cuda_driver()
        ok = d.CUresult.CUDA_SUCCESS
        assert d.cuInit(0)[0] == ok, "cuInit failed"
        err, dev = d.cuDeviceGet(0)
        assert err == ok, f"cuDeviceGet: {err}"
        err, total = d.cuDeviceTotalMem(dev)
        assert err == ok, f"cuDeviceTotalMem: {err}"
        get_uuid = getattr(d, "cuDeviceGetUuid", None) or getattr(d, "cuDeviceGetUuid_v2")
        err, raw = get_uuid(dev)
        out = {"via": "cuDeviceTotalMem", "total": int(total),
               "uuid": cc.uuid_text(raw.bytes) if err == ok else None}
    except Exception as e:
        out["cuda_bindings_error"] = f"{type(e).__name__}: {e}"
        import torch
        out.update(via="torch total_memory", total=int(torch.cuda.get_device_properties(0).total_memory),
                   uuid=None)
    print("DEVICE " + json.dumps(out), flush=True)


def reference_total():
    child = subprocess.run([sys.executable, os.path.abspath(__file__), "--device-total-child"],
                           env=cc.env_without_preload(), capture_output=True, text=True, timeout=60)
    for line in child.stdout.splitlines():
        if line.startswith("DEVICE "):
            return json.loads(line[len("DEVICE "):])
    raise cc.CheckFailed(f"could not read the device's total without LD_PRELOAD (rc {child.returncode}): "
                         f"{(child.stderr or child.stdout).strip()[-400:]}")


def smi_total_mib(uuid):
    """nvidia-smi's memory.total (MiB) for this GPU, run without LD_PRELOAD; None if unavailable."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=uuid,memory.total", "--format=csv,noheader,nounits"],
                             env=cc.env_without_preload(), capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        cc.log(f"nvidia-smi could not run: {e}")
        return None
    rows = [[p.strip() for p in l.split(",")] for l in out.stdout.splitlines() if l.strip()]
    rows = [r for r in rows if len(r) >= 2 and r[1].isdigit()]
    for r in rows:
        if uuid is not None and r[0] == uuid:
            return int(r[1])
    if uuid is None and len(rows) == 1:
        return int(rows[0][1])
    return None


def body(args, data):
    limit = os.environ.get("SLICE_MEMORY_LIMIT", "")
    parts = billionths(limit)
    data["slice_memory_limit"] = limit
    cc.expect(parts is not None, f"SLICE_MEMORY_LIMIT={limit!r} is not a percentage; "
              "run this check under SLICE_MEMORY_LIMIT=25%")
    ref = reference_total()
    device_total = ref["total"]
    smi_mib = smi_total_mib(ref.get("uuid"))
    expected = device_total * parts // 10**9
    data.update(percent=parts / 10**7, device_total_bytes=device_total, device_total_via=ref["via"],
                device_uuid=ref.get("uuid"), smi_total_mib=smi_mib, expected_cap_bytes=expected)
    if "cuda_bindings_error" in ref:
        data["cuda_bindings_error"] = ref["cuda_bindings_error"]
    cc.log(f"without libslice: device total {cc.fmt_bytes(device_total)} ({ref['via']}), nvidia-smi "
           f"{smi_mib} MiB; {limit} of the device = {cc.fmt_bytes(expected)}")

    torch = cc.import_module("torch")
    if not torch.cuda.is_available():
        cc.no_device("torch", "torch.cuda.is_available() is False")
    free0, total = torch.cuda.mem_get_info()
    data.update(total_bytes=total, free_bytes_at_start=free0, context_bytes=total - free0)
    cc.log(f"under libslice: mem_get_info free {cc.fmt_bytes(free0)}, total {cc.fmt_bytes(total)}")
    data["nvml_used_at_start"] = cc.truth("at start")
    data["delta_vs_driver_bytes"] = total - expected
    if smi_mib is not None:
        smi_expected = smi_mib * cc.MiB * parts // 10**9
        data.update(expected_from_smi_bytes=smi_expected, delta_vs_smi_bytes=total - smi_expected)
        cc.log(f"{limit} of nvidia-smi's total = {cc.fmt_bytes(smi_expected)}; "
               f"mem_get_info total differs by {cc.fmt_bytes(total - smi_expected)}")
    if args.reference == "smi":
        cc.expect(smi_mib is not None, "nvidia-smi (without LD_PRELOAD) gave no total for this GPU")
        cc.expect(abs(total - data["expected_from_smi_bytes"]) <= cc.MiB,
                  f"mem_get_info total {cc.fmt_bytes(total)} is not {limit} of nvidia-smi's "
                  f"{smi_mib} MiB ({cc.fmt_bytes(data['expected_from_smi_bytes'])})")
    else:
        cc.expect(abs(total - expected) <= cc.MiB,
                  f"mem_get_info total {cc.fmt_bytes(total)} is not {limit} of the device's "
                  f"{cc.fmt_bytes(device_total)} ({cc.fmt_bytes(expected)})")
    cap = total

    # 90% of the slice in one tensor: fits.
    size90 = int(0.9 * cap) // (2 * cc.MiB) * (2 * cc.MiB)
    try:
        t = torch.empty(size90, dtype=torch.uint8, device="cuda")
    except torch.cuda.OutOfMemoryError as e:
        raise cc.CheckFailed(f"90% of the slice ({cc.fmt_bytes(size90)}) was refused: "
                             f"{str(e).strip().splitlines()[0][:300]}")
    t[: 1 << 20].fill_(1)
    torch.cuda.synchronize()
    data["nvml_used_at_90"] = used = cc.truth("holding 90%")
    data["context_measurable"] = used is not None
    cc.check_truth_under_cap(used, cap, "holding 90% of the slice")
    del t
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    cc.log(f"90% ({cc.fmt_bytes(size90)}) allocated and freed")

    # 110%: refused.
    size110 = int(1.1 * cap) // (2 * cc.MiB) * (2 * cc.MiB)
    try:
        t = torch.empty(size110, dtype=torch.uint8, device="cuda")
        del t
        torch.cuda.empty_cache()
        raise cc.CheckFailed(f"110% of the slice ({cc.fmt_bytes(size110)}) was allocated")
    except torch.cuda.OutOfMemoryError as e:
        data["refusal_110"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}"
    cc.log(f"110% ({cc.fmt_bytes(size110)}) refused")
    data.update(allocated_90_bytes=size90, refused_110_bytes=size110)
    return f"total is {limit} of the device ({cc.fmt_bytes(total)}); 90% fits, 110% refused"


def main():
    if "--device-total-child" in sys.argv:
        device_total_child()
        return
    p = cc.parser(__doc__.split("\n\n")[0])
    p.add_argument("--reference", choices=["driver", "smi"], default="driver",
                   help="what N%% is compared against (default: the driver's cuDeviceTotalMem)")
    args = p.parse_args()
    cc.run("percent-cap", body, args)


if __name__ == "__main__":
    main()
