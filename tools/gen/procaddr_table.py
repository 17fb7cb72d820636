#!/usr/bin/env python3
"""Generate the cuGetProcAddress map: (name, cudaVersion, per-thread) -> exported driver symbol.

The driver answers cuGetProcAddress(name, cudaVersion, flags) with one of its exports, and one name
means different ABIs at different versions. cudaTypedefs.h records every ABI a name has had as
PFN_<name>_v<version> (and PFN_<name>_v<version>_ptsz / _ptds for the per-thread-default-stream
variants). The rule this script applies, checked against the CUDA 13 runtime's recorded look-ups
(tests/data/cudart13-procaddr-lookups.tsv) and the stub libcuda's export list:

  * The distinct default (non-per-thread) typedef versions of a name, in ascending order, are its
    ABIs; the n-th ABI is exported as <name> for n = 1 and <name>_v<n> after that
    (cuCtxCreate: v2000 -> cuCtxCreate, v3020 -> _v2, v11040 -> _v3, v12050 -> _v4). Typedefs in
    the __CUDA_API_VERSION_INTERNAL ("older versioned functions") section count like any other:
    the driver still serves those ABIs to callers that ask with an old version.
  * A per-thread typedef PFN_<name>_v<V>_ptsz is the per-thread twin of the ABI in effect at V,
    exported as that ABI's export plus _ptsz or _ptds (cuMemcpyHtoD_v7000_ptds -> ABI v3020 ->
    cuMemcpyHtoD_v2_ptds). Which suffix a function uses is read from cuda.h's __CUDA_API_PTDS /
    __CUDA_API_PTSZ macros and must agree with the typedef's own suffix.
  * A request (name, V) takes the newest ABI whose version is <= V; resolution itself lives in
    libslice/procaddr/procaddr_map.cpp.

cuda.h also renames public names to their current export (#define cuMemAlloc cuMemAlloc_v2). Each
such rename must equal the newest ABI the rule derives; where it does not, the generator stops
unless OVERRIDES below accounts for it, so a new toolkit cannot change the map silently.

The graphics interop functions (OpenGL, EGL, VDPAU) follow the same rule from their own headers
(--interop-typedefs: cudaGLTypedefs.h and the like, each beside its API header cudaGL.h and the
like, which holds its renames and per-thread macros). The real driver answers them (driver 580:
every GL, EGL and VDPAU look-up of the CUDA 13 runtime found). The toolkit's stub libcuda does not
export them, so --check-exports leaves them out. Typedefs under #ifdef _WIN32 (cuWGLGetDevice) are
not Linux exports and are skipped.
"""

import argparse
import collections
import re
import shutil
import subprocess
import sys

# Exceptions the rule cannot derive from cudaTypedefs.h: (name, version, per_thread) -> export.
# An entry adds a row to the table, or replaces the derived one with the same key.
OVERRIDES = {
    # The profiler API's typedefs live in cudaProfilerTypedefs.h, not cudaTypedefs.h, but the driver
    # exports these symbols and the CUDA 13 runtime looks them up at 4000 (recorded in the TSV).
    ("cuProfilerInitialize", 4000, False): "cuProfilerInitialize",
    ("cuProfilerStart", 4000, False): "cuProfilerStart",
    ("cuProfilerStop", 4000, False): "cuProfilerStop",
    # CUDA 12.0 replaced cuGraphInstantiate's 5-argument ABI by cuGraphInstantiateWithFlags' one
    # (cuda.h: #define cuGraphInstantiate cuGraphInstantiateWithFlags), but cudaTypedefs.h has no
    # PFN_cuGraphInstantiate_v12000, so the rule would keep handing out the old cuGraphInstantiate_v2
    # to callers that ask with >= 12000 and call it with the 12.x prototype. Not covered by the
    # recorded look-ups (the runtime asks at 10000 and 11000 only); still to be confirmed against a
    # real driver.
    ("cuGraphInstantiate", 12000, False): "cuGraphInstantiateWithFlags",
}

TYPEDEF_RE = re.compile(r"\bPFN_(cu\w+?)_v(\d+)(?:_(ptsz|ptds))?\)")
# "#define cuX cuX_v2" or "#define cuX __CUDA_API_PTSZ(cuX_v2)"
DEFINE_RE = re.compile(
    r"^[ \t]*#define[ \t]+(cu\w+)[ \t]+(?:__CUDA_API_(PTDS|PTSZ)\((cu\w+)\)|(cu\w+))[ \t]*$", re.M)
CUDA_VERSION_RE = re.compile(r"^#define[ \t]+CUDA_VERSION[ \t]+(\d+)", re.M)


def fail(msg):
    sys.exit(f"procaddr_table.py: error: {msg}")


def abi_export(name, index):
    return name if index == 0 else f"{name}_v{index + 1}"


def without_windows_only(text):
    """The text without its #ifdef _WIN32 ... #endif blocks (nested conditionals kept track of)."""
    kept, depth = [], 0
    for line in text.splitlines():
        directive = line.strip()
        if depth:
            if directive.startswith("#if"):
                depth += 1
            elif directive.startswith("#endif"):
                depth -= 1
            elif depth == 1 and directive.startswith(("#else", "#elif")):
                depth = 0  # what is not Windows-only again (its #endif then stays, harmless)
            continue
        if re.match(r"#\s*(ifdef\s+_WIN32\b|if\s+defined\s*\(?\s*_WIN32\b)", directive):
            depth = 1
            continue
        kept.append(line)
    return "\n".join(kept)


def api_header(typedefs_path):
    """cudaGLTypedefs.h -> cudaGL.h beside it: the API header whose renames the typedefs go with."""
    if not typedefs_path.endswith("Typedefs.h"):
        fail(f"{typedefs_path}: expected a ...Typedefs.h header")
    return typedefs_path[: -len("Typedefs.h")] + ".h"


def parse_typedefs(text):
    """name -> sorted default versions, and name -> {version: typedef suffix} for per-thread ones."""
    text = without_windows_only(text)
    defaults = collections.defaultdict(set)
    per_thread = collections.defaultdict(dict)
    for m in TYPEDEF_RE.finditer(text):
        name, version, suffix = m.group(1), int(m.group(2)), m.group(3)
        if suffix:
            per_thread[name][version] = suffix
        else:
            defaults[name].add(version)
    return {n: sorted(v) for n, v in defaults.items()}, dict(per_thread)


def parse_cuda_h(text):
    """name -> (target, 'ptds'|'ptsz'|None) for cuda.h's renaming #defines."""
    renames = {}
    for m in DEFINE_RE.finditer(text):
        name, pt, target = m.group(1), m.group(2), m.group(3) or m.group(4)
        renames[name] = (target, pt.lower() if pt else None)
    version = CUDA_VERSION_RE.search(text)
    return renames, int(version.group(1)) if version else None


def build_entries(defaults, per_thread, renames):
    """[(name, version, per_thread, export)] following the rule, then OVERRIDES."""
    entries = {}
    for name, versions in defaults.items():
        for i, v in enumerate(versions):
            entries[(name, v, False)] = abi_export(name, i)
    for name, variants in per_thread.items():
        versions = defaults.get(name, [])
        suffix = renames.get(name, (None, None))[1]
        for v, typedef_suffix in variants.items():
            if suffix is None:
                fail(f"PFN_{name}_v{v}_{typedef_suffix}: cuda.h has no __CUDA_API_PTDS/PTSZ macro for {name}")
            if suffix != typedef_suffix:
                fail(f"PFN_{name}_v{v}_{typedef_suffix}: cuda.h says _{suffix}")
            older = [x for x in versions if x <= v]
            if not older:
                # The resolver falls back to the default ABI; it must exist.
                fail(f"PFN_{name}_v{v}_{suffix} has no default ABI at or before {v}")
            entries[(name, v, True)] = f"{abi_export(name, versions.index(older[-1]))}_{suffix}"
        # A default ABI newer than every per-thread variant before it would leave per-thread callers
        # on an old ABI; the resolver avoids that, but the headers have never done it: say so if they do.
        first_pt = min(variants)
        for v in versions:
            if v > first_pt and v not in variants:
                print(f"procaddr_table.py: note: {name} ABI v{v} has no per-thread twin", file=sys.stderr)
    entries.update(OVERRIDES)
    return entries


def check_against_cuda_h(entries, renames):
    """Every cuda.h rename of a known name must be the newest default ABI's export."""
    newest = {}
    for (name, version, pt), export in sorted(entries.items()):
        if not pt:
            newest[name] = export  # sorted by version, so the last one wins
    for name, (target, _) in sorted(renames.items()):
        # "#define cuX __CUDA_API_PTSZ(cuX)" only names the suffix; it says nothing about the ABI.
        if name in newest and target != name and newest[name] != target:
            fail(f"cuda.h maps {name} to {target}, the table's newest ABI is {newest[name]}: "
                 f"add an OVERRIDES entry (or fix the rule)")


def driver_exports(stub):
    nm = shutil.which("nm")
    if nm is None:
        fail("--check-exports needs nm (binutils)")
    out = subprocess.run([nm, "-D", "--defined-only", stub], check=True, capture_output=True, text=True).stdout
    # Lines are "ADDRESS TYPE NAME[@VERSION]".
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if len(line.split()) >= 3}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--typedefs", required=True, help="cudaTypedefs.h")
    ap.add_argument("--cuda-h", required=True, help="cuda.h")
    ap.add_argument("--out-table", required=True, help="output: SLICE_PROCADDR_ENTRY(...) lines")
    ap.add_argument("--out-exports", required=True, help="output: SLICE_DRIVER_EXPORT(...) lines")
    ap.add_argument("--interop-typedefs", action="append", default=[], metavar="TYPEDEFS_H",
                    help="cudaGLTypedefs.h, cudaEGLTypedefs.h, cudaVDPAUTypedefs.h (repeatable); each API header "
                         "(cudaGL.h...) is read from beside it")
    ap.add_argument("--check-exports", metavar="LIBCUDA", help="fail unless LIBCUDA exports every symbol")
    args = ap.parse_args()

    with open(args.typedefs) as f:
        defaults, per_thread = parse_typedefs(f.read())
    with open(args.cuda_h) as f:
        renames, cuda_version = parse_cuda_h(f.read())
    if len(defaults) < 100:
        fail(f"only {len(defaults)} functions found in {args.typedefs}: not a cudaTypedefs.h?")

    interop_names = set()
    for path in args.interop_typedefs:
        with open(path) as f:
            more_defaults, more_per_thread = parse_typedefs(f.read())
        with open(api_header(path)) as f:
            more_renames, _ = parse_cuda_h(f.read())
        if not more_defaults:
            fail(f"no functions found in {path}")
        clash = (set(more_defaults) | set(more_per_thread)) & (set(defaults) | set(per_thread) | interop_names)
        if clash:
            fail(f"{path} names functions already seen: {' '.join(sorted(clash))}")
        interop_names |= set(more_defaults) | set(more_per_thread)
        defaults.update(more_defaults)
        per_thread.update(more_per_thread)
        renames.update(more_renames)

    entries = build_entries(defaults, per_thread, renames)
    check_against_cuda_h(entries, renames)
    exports = sorted(set(entries.values()))

    if args.check_exports:
        stub = driver_exports(args.check_exports)
        interop_exports = {e for (name, _, _), e in entries.items() if name in interop_names}
        missing = [e for e in exports if e not in stub and e not in interop_exports]
        if missing:
            fail(f"{len(missing)} symbols not exported by {args.check_exports}: {' '.join(missing)}")

    sources = " ".join([args.typedefs, args.cuda_h] + args.interop_typedefs)
    origin = (f"// Generated by tools/gen/procaddr_table.py from {sources}"
              f" (CUDA_VERSION {cuda_version}). Do not edit.\n")
    with open(args.out_table, "w") as f:
        f.write(origin)
        f.write("// SLICE_PROCADDR_ENTRY(name, cudaVersion, per_thread, export), sorted by name, version, per_thread.\n")
        for (name, version, pt), export in sorted(entries.items()):
            f.write(f'SLICE_PROCADDR_ENTRY("{name}", {version}, {int(pt)}, {export})\n')
    with open(args.out_exports, "w") as f:
        f.write(origin)
        f.write("// SLICE_DRIVER_EXPORT(symbol): every driver export the cuGetProcAddress table can hand out.\n")
        for export in exports:
            f.write(f"SLICE_DRIVER_EXPORT({export})\n")


if __name__ == "__main__":
    main()
