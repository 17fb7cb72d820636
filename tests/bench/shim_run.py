"""What the per-call benchmarks of libslice.so on the simulated GPU (shim_instructions.py,
shim_syscalls.py) share: their common arguments, the files they run, and the environment of
`shim_bench` (libslice's own variables and preload taken out, SLICE_MEMORY_LIMIT=16Gi unless
--no-limit, SLICE_TENANT=bench, the simulator's folder first on LD_LIBRARY_PATH)."""
import os


def add_arguments(ap):
    """--build, --libslice and --no-limit."""
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--build", default=os.path.join(here, "..", "..", "build"))
    ap.add_argument("--libslice", help="the libslice.so to measure (default: BUILD/lib/libslice.so)")
    ap.add_argument("--no-limit", action="store_true", help="no SLICE_MEMORY_LIMIT (the default has 16Gi)")


def paths(args):
    """(build folder, libslice.so, shim_bench), absolute."""
    build = os.path.abspath(args.build)
    lib = os.path.abspath(args.libslice or os.path.join(build, "lib", "libslice.so"))
    return build, lib, os.path.join(build, "bin", "shim_bench")


def bench_env(build, no_limit):
    """The environment shim_bench runs in, without libslice (the caller adds LD_PRELOAD)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLICE_") and k != "LD_PRELOAD"}
    if not no_limit:
        env.update(SLICE_MEMORY_LIMIT="16Gi")
    env.update(SLICE_TENANT="bench",
               LD_LIBRARY_PATH=os.path.join(build, "simgpu") + (":" + env["LD_LIBRARY_PATH"]
                                                                 if env.get("LD_LIBRARY_PATH") else ""))
    return env
