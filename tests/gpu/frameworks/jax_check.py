"""JAX under libslice: its preallocation is a fraction of the cap, not of the card.

    python3 tests/gpu/frameworks/jax_check.py [--cap BYTES] [--allow-missing] [--timeout S]

With JAX's default memory settings (preallocation on, 75% of the total GPU memory: the variables
XLA_PYTHON_CLIENT_PREALLOCATE, XLA_PYTHON_CLIENT_MEM_FRACTION, XLA_CLIENT_MEM_FRACTION and
XLA_PYTHON_CLIENT_ALLOCATOR are removed from the environment before JAX is imported), after a first
jax.numpy operation on the GPU the pool JAX preallocated must be at most 0.8 x cap + 64 MiB. The
pool is memory_stats()["pool_bytes"] (the BFC allocator's preallocated region), else "bytes_limit".
Where NVML lists this process, the whole process (context included) must also stay under the cap.
A small jnp computation (a sum and a 256x256 matmul) must give the right answer. Use a cap of 4 GiB
or more: 75% of a 2 GiB cap plus the context and the libraries' own memory is close to the cap.

Recent JAX (the "0.75+" policy) preallocates 75% but lets the pool grow to 100% later, so
"bytes_limit" may be the whole cap while "pool_bytes" is 75% of it; this check prefers "pool_bytes".
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_common as cc  # noqa: E402

JAX_MEMORY_VARS = ("XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION",
                   "XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_ALLOCATOR")


def body(args, data):
    cap = cc.cap_from(args)
    data["cap_bytes"] = cap
    removed = {v: os.environ.pop(v) for v in JAX_MEMORY_VARS if v in os.environ}
    if removed:
        cc.log(f"removed from the environment for JAX's defaults: {removed}")
        data["removed_env"] = removed
    if os.environ.get("XLA_FLAGS"):
        cc.log(f"note: XLA_FLAGS={os.environ['XLA_FLAGS']!r} is set")
        data["xla_flags"] = os.environ["XLA_FLAGS"]
    # The GPU and nothing else: no quiet fall-back to the CPU.
    os.environ["JAX_PLATFORMS"] = "cuda"
    if cap < 4 * cc.GiB:
        cc.log(f"note: a cap of {cc.fmt_bytes(cap)} leaves little room beside 75% of it; "
               "4 GiB or more is advised")

    jax = cc.import_module("jax")
    jnp = cc.import_module("jax.numpy")
    cc.log(f"jax {jax.__version__}")
    try:
        devices = jax.devices()
    except RuntimeError as e:
        cc.no_device("jax", f"{type(e).__name__}: {e}")
    gpus = [d for d in devices if d.platform == "gpu"]
    if not gpus:
        cc.no_device("jax", f"no GPU among {devices}")
    dev = gpus[0]
    data["device"] = str(dev)

    # The first operation: the backend, and its preallocation, exist from here on.
    x = jax.device_put(jnp.arange(1024, dtype=jnp.float32), dev)
    total = float((x * 2).sum().block_until_ready())
    cc.log(f"first op on {dev}: sum(2 * arange(1024)) = {total}")

    stats = dev.memory_stats()
    cc.log(f"memory_stats(): {stats}")
    used = cc.truth("after the first op")
    data["nvml_used"] = used
    data["context_measurable"] = used is not None
    if stats:
        data["memory_stats"] = {k: stats[k] for k in ("bytes_limit", "pool_bytes", "peak_pool_bytes",
                                                      "bytes_in_use", "bytes_reservable_limit",
                                                      "largest_free_block_bytes") if k in stats}
    pool = None
    pool_key = None
    for key in ("pool_bytes", "bytes_limit"):
        if stats and stats.get(key):
            pool, pool_key = int(stats[key]), key
            break
    data.update(pool_bytes=pool, pool_key=pool_key)

    cc.expect(pool is not None or used is not None,
              "cannot tell what JAX took: memory_stats() has neither pool_bytes nor bytes_limit, "
              "and NVML does not list this process")
    limit = int(0.8 * cap) + 64 * cc.MiB
    if pool is not None:
        data["pool_fraction_of_cap"] = pool / cap
        cc.log(f"JAX's pool ({pool_key}) {cc.fmt_bytes(pool)} = {pool / cap:.3f} of the cap")
        cc.expect(pool <= limit, f"JAX's pool ({pool_key}) is {cc.fmt_bytes(pool)}, more than "
                  f"0.8 x cap + 64 MiB = {cc.fmt_bytes(limit)}: sized from the card, not the cap?")
        if pool < 0.6 * cap:
            cc.log("note: the pool is well under 75% of the cap")
    cc.check_truth_under_cap(used, cap, "after JAX's preallocation")
    if used is not None and pool is not None and used < pool:
        cc.log(f"note: NVML's figure {cc.fmt_bytes(used)} is below JAX's pool {cc.fmt_bytes(pool)}")

    cc.expect(total == 1047552.0, f"sum(2 * arange(1024)) = {total}, expected 1047552")
    a = jnp.ones((256, 256), dtype=jnp.float32)
    product = (a @ a).block_until_ready()
    cc.expect(bool(jnp.all(product == 256.0)), "a 256x256 matmul of ones is not all 256")
    cc.log("jnp sum and matmul correct")
    return (f"JAX's pool {pool / cap:.2f} of the cap" if pool is not None
            else "JAX's process memory under the cap") + "; jnp results correct"


def main():
    args = cc.parser(__doc__.split("\n\n")[0]).parse_args()
    cc.run("jax", body, args)


if __name__ == "__main__":
    main()
