#!/usr/bin/env python3
"""examples/kubernetes: every file parses as YAML with the kinds expected, the kustomization lists
files that exist, the DaemonSet runs the plugin with an init container that installs libslice.so and
ld.so.preload, the sample asks for libslice.io/gpu-slice: 2; and `kubectl kustomize` renders it
where kubectl exists.

usage: check_manifests.py EXAMPLES_DIR
"""
import os
import shutil
import subprocess
import sys

import yaml


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def main():
    root = sys.argv[1]
    kustomization = yaml.safe_load(open(os.path.join(root, "kustomization.yaml")))
    if kustomization.get("kind") != "Kustomization":
        fail("kustomization.yaml is not a Kustomization")
    objects = []
    for name in kustomization.get("resources", []):
        path = os.path.join(root, name)
        if not os.path.isfile(path):
            fail("kustomization lists %s, which does not exist" % name)
        for doc in yaml.safe_load_all(open(path)):
            if doc is None:
                continue
            if not doc.get("apiVersion") or not doc.get("kind") or not doc.get("metadata", {}).get("name"):
                fail("%s: an object without apiVersion, kind or metadata.name" % name)
            objects.append(doc)
    kinds = {o["kind"] for o in objects}
    for kind in ("DaemonSet", "Deployment"):
        if kind not in kinds:
            fail("no %s" % kind)

    ds = next(o for o in objects if o["kind"] == "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    if not pod.get("nodeSelector"):
        fail("the DaemonSet has no node selector")
    if ds["spec"]["selector"]["matchLabels"].items() > ds["spec"]["template"]["metadata"]["labels"].items():
        fail("the DaemonSet's selector does not match its pods")
    plugin = pod["containers"][0]
    if "slice-device-plugin" not in " ".join(plugin.get("command", []) + plugin.get("args", [])):
        fail("the DaemonSet does not run slice-device-plugin")
    mounts = {m["mountPath"] for m in plugin.get("volumeMounts", [])}
    if "/var/lib/kubelet/device-plugins" not in mounts:
        fail("the plugin does not mount the kubelet's device-plugin folder")
    # The folders the plugin hands to containers as host paths: mounted at the same path from the
    # node (the coordinator, and the persistent policy folder it writes each pod's limits into).
    host_paths = {v["name"]: v.get("hostPath", {}).get("path") for v in pod.get("volumes", [])}
    mounted = {m["mountPath"]: host_paths.get(m["name"]) for m in plugin.get("volumeMounts", [])}
    for option in ("--coordinator-dir", "--policy-dir"):
        value = next((a.split("=", 1)[1] for a in plugin.get("args", []) if a.startswith(option + "=")), None)
        if value is None:
            fail("the plugin is not given %s" % option)
        if mounted.get(value) != value:
            fail("%s=%s is not the node's %s mounted at the same path" % (option, value, value))
    init = " ".join(" ".join(c.get("command", []) + c.get("args", [])) for c in pod.get("initContainers", []))
    if "libslice.so" not in init or "ld.so.preload" not in init:
        fail("no init container installs libslice.so and ld.so.preload")
    volumes = {v["name"] for v in pod.get("volumes", [])}
    for c in pod["containers"] + pod.get("initContainers", []):
        for m in c.get("volumeMounts", []):
            if m["name"] not in volumes:
                fail("volume %s is mounted but not declared" % m["name"])

    deployment = next(o for o in objects if o["kind"] == "Deployment")
    limits = deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    if str(limits.get("libslice.io/gpu-slice")) != "2":
        fail("the sample Deployment does not ask for libslice.io/gpu-slice: 2")

    kubectl = shutil.which("kubectl")
    if kubectl is None:
        print("SKIP: kubectl is not installed: `kubectl kustomize` not run (the YAML was checked)")
        return
    rendered = subprocess.run([kubectl, "kustomize", root], capture_output=True, text=True)
    if rendered.returncode != 0:
        fail("kubectl kustomize: " + rendered.stderr)
    rendered_kinds = {d["kind"] for d in yaml.safe_load_all(rendered.stdout) if d}
    if not kinds <= rendered_kinds:
        fail("kubectl kustomize lost kinds: %r" % (kinds - rendered_kinds))
    print("ok: %d objects (%s); kubectl kustomize renders them" % (len(objects), ", ".join(sorted(kinds))))


main()
