#!/usr/bin/env python3
"""slice-cdi-gen on the simulated GPU (2 GPUs of 8 GiB): the structure the CDI specification
requires, and libslice's edits in every device.

usage: check_cdi_spec.py SLICE_CDI_GEN
"""
import json
import os
import re
import subprocess
import sys
import tempfile

GPUS = ["GPU-516d696d-6770-4075-8000-000000000000", "GPU-516d696d-6770-4075-8000-000000000001"]
SLICES = 4
SLICE_BYTES = 2048 << 20
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")  # the CDI device name syntax
KIND = re.compile(r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?/[a-zA-Z0-9]([a-zA-Z0-9_.-]*[a-zA-Z0-9])?$")
HOOKS = {"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"}


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def main():
    gen = sys.argv[1]
    tmp = os.environ.get("SLICE_TEST_TMPDIR") or tempfile.mkdtemp()
    out = os.path.join(tmp, "cdi", "libslice.json")
    env = dict(os.environ, SIMGPU_DEVICES="2", SIMGPU_MEMORY="8Gi")
    # A fresh host: neither the coordinator folder nor the policy folder exists yet.
    coordinator = os.path.join(tmp, "host-coordinator")
    policies = os.path.join(tmp, "host-etc", "libslice", "policy")
    subprocess.run([gen, "--output", out, "--slices", str(SLICES), "--hook-path", "/usr/local/bin/slice-cdi-gen",
                    "--coordinator-dir", coordinator, "--policy-dir", policies], env=env, check=True)
    spec = json.load(open(out))
    # Writing the spec made the sources of its bind mounts (the hook runs too late for that).
    for folder, mode in ((coordinator, 0o1777), (coordinator + "/tenants", 0o1777), (policies, 0o755)):
        if not os.path.isdir(folder):
            fail("writing the spec did not make %s, which it mounts" % folder)
        st = os.stat(folder)
        if os.geteuid() == 0 and (st.st_uid != 0 or (st.st_mode & 0o7777) != mode):
            fail("%s: owner %d, mode %o; expected root's, %o" % (folder, st.st_uid, st.st_mode & 0o7777, mode))

    # Required top-level fields.
    if spec.get("cdiVersion") != "0.3.0":
        fail("cdiVersion should be the lowest the spec needs, 0.3.0: %r" % spec.get("cdiVersion"))
    if not KIND.match(spec.get("kind", "")):
        fail("kind is not VENDOR/CLASS: %r" % spec.get("kind"))
    devices = spec.get("devices")
    if not isinstance(devices, list) or len(devices) != len(GPUS) * SLICES:
        fail("one device per GPU and slice count: %d expected" % (len(GPUS) * SLICES))
    names = [d.get("name", "") for d in devices]
    if len(set(names)) != len(names):
        fail("device names repeat")
    for gpu_index, uuid in enumerate(GPUS):
        key = uuid.replace("-", "_")
        for count in range(1, SLICES + 1):
            name = "gpu%d-%dof%d" % (gpu_index, count, SLICES)
            device = next((d for d in devices if d.get("name") == name), None)
            if device is None:
                fail("no device %s" % name)
            if not NAME.match(name) or not name[0].isalpha():
                fail("device name %r" % name)
            edits = device.get("containerEdits")
            if not isinstance(edits, dict):
                fail("%s has no containerEdits" % name)
            env = dict(e.split("=", 1) for e in edits.get("env", []))
            expected = {
                "NVIDIA_VISIBLE_DEVICES": uuid,
                "SLICE_MEMORY_LIMIT_" + key: str(count * SLICE_BYTES),
                "SLICE_COMPUTE_SHARE_" + key: str(count * 100 // SLICES),
                "SLICE_COORDINATOR_DIR": "/run/libslice",
                "SLICE_POLICY_DIR": "/etc/libslice/policy",
            }
            if env != expected:
                fail("%s env %r, expected %r" % (name, env, expected))
            mounts = {m["containerPath"]: m for m in edits.get("mounts", [])}
            for path in ("/etc/ld.so.preload", "/usr/local/libslice/libslice.so", "/run/libslice", "/etc/libslice/policy"):
                m = mounts.get(path)
                if m is None or not m.get("hostPath", "").startswith("/") or "bind" not in m.get("options", []):
                    fail("%s: mount of %s: %r" % (name, path, m))
            if "ro" not in mounts["/etc/ld.so.preload"]["options"] or "ro" not in mounts["/etc/libslice/policy"]["options"]:
                fail("%s: ld.so.preload and the policy folder must be read-only" % name)
            if mounts["/etc/libslice/policy"]["hostPath"] != policies or mounts["/run/libslice"]["hostPath"] != coordinator:
                fail("%s: the coordinator and policy folders mounted from elsewhere: %r" % (name, mounts))
            hooks = edits.get("hooks", [])
            if not hooks or any(h.get("hookName") not in HOOKS or not h.get("path", "").startswith("/") for h in hooks):
                fail("%s hooks %r" % (name, hooks))
            if hooks[0]["args"][1:] != ["--prepare-coordinator", coordinator, "--policy-dir", policies]:
                fail("%s hook args %r" % (name, hooks[0]["args"]))

    # The hook itself: prepares a coordinator folder.
    folder = os.path.join(tmp, "hook-coordinator")
    subprocess.run([gen, "--prepare-coordinator", folder, "--policy-dir", os.path.join(tmp, "hook-policy")], check=True)
    if not os.path.isdir(folder):
        fail("the hook did not make %s" % folder)
    # A wrong command line exits 2.
    for bad in (["--slices", "0"], ["--kind", "nokind"], ["--bogus", "1"], ["--output"]):
        if subprocess.run([gen] + bad, env=env, capture_output=True).returncode != 2:
            fail("%r should exit 2" % bad)
    print("ok: %d devices, cdiVersion %s" % (len(devices), spec["cdiVersion"]))


main()
