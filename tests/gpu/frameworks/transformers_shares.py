"""Token throughput of a causal LM under a compute share: two tenants, alone and together.

    python3 tests/gpu/frameworks/transformers_shares.py --name a|b --ready-file F --plan-file P
        [--batch 256] [--prompt 64] [--new-tokens 16] [--layers 6] [--hidden 2048]
        [--plan-timeout 150] [--allow-missing] [--timeout S]
    python3 tests/gpu/frameworks/transformers_shares.py [--seconds S]       (one window, alone)
    python3 tests/gpu/frameworks/transformers_shares.py --make-plan READY_A READY_B --plan-out P
        [--solo 4] [--joint 12] [--lead 1]
    python3 tests/gpu/frameworks/transformers_shares.py --judge OUT_A OUT_B [--figures FILE]
        [--expect 0.30] [--tolerance 0.10] [--contended-below 1.5]

The model: GPT-2 built from a config with random weights (nothing is downloaded), in fp16 on the
GPU: 6 layers, 2048 wide, 16 heads, a vocabulary of 1000 (about 300 M parameters, 0.6 GB). It
generates greedily, a batch of 256 random prompts of 64 tokens, 16 new tokens per call, without a
KV cache: each new token is a forward pass over the whole batch and sequence (about 20 k tokens,
about 11 TFLOP), so a call is GPU-bound: tens of milliseconds of device work per step against a few
of Python. A small model generating a few tokens is CPU- and launch-bound instead, and then two
tenants each get what they ask for on an unsaturated GPU, whatever their shares (libslice is
work-conserving: time nobody else wants goes to whoever wants it). It stays well under a 4 GiB cap.

The protocol with tests/gpu/run.sh (files, no fixed delays):
1. each process loads its model, warms up (two calls), then writes its ready file (JSON: call_s,
   tokens_per_call...) atomically;
2. run.sh waits for both, then writes the plan (--make-plan): a solo window for a, then one for b
   (the other process sleeps meanwhile), then a common window for both, separated by gaps longer
   than a call; the plan file appears atomically and each process polls for it;
3. each process measures its windows: calls in a loop, the tokens of a call that straddles a
   window's edge counted in proportion to its time inside; RESULT: solo_tokens_per_s,
   joint_tokens_per_s, late_s per window;
4. --judge compares: each tenant's rate together as a fraction of its rate alone (fa, fb). Only when
   the pair is contended (fa + fb below --contended-below: together they get well less than two
   solo rates) do the shares decide anything; then the 30% tenant's part, fa / (fa + fb), must be
   --expect +- --tolerance. Otherwise the judge SKIPs (exit 3) "not contended", with the figures.
"""
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_common as cc  # noqa: E402

VOCAB = 1000


# ----------------------------------------------------------------------------------------------
# Orchestration helpers (no GPU): the plan and the judgement.

def write_atomically(path, text):
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def make_plan(ready_a, ready_b, plan_out, solo, joint, lead, now=None):
    ready = {}
    for name, path in (("a", ready_a), ("b", ready_b)):
        with open(path) as f:
            ready[name] = json.load(f)
    call = max(float(r["call_s"]) for r in ready.values())
    gap = 1.5 * call + 0.5
    solo = max(solo, 4 * call)
    joint = max(joint, 10 * call)
    t = (time.time() if now is None else now) + lead
    solo_a = [t, t + solo]
    solo_b = [solo_a[1] + gap, solo_a[1] + gap + solo]
    both = [solo_b[1] + gap, solo_b[1] + gap + joint]
    plan = {"made_at": t - lead, "gap_s": gap, "call_s": call,
            "windows": {"a": [["solo", *solo_a], ["joint", *both]],
                        "b": [["solo", *solo_b], ["joint", *both]]}}
    write_atomically(plan_out, json.dumps(plan))
    print(f"plan: calls of up to {call:.3f} s; solo windows of {solo:.1f} s (a, then b), then both "
          f"for {joint:.1f} s; gaps of {gap:.2f} s; ends {both[1] - time.time():.1f} s from now")
    return plan


def last_result(path):
    rows = [l for l in open(path, errors="replace") if l.startswith("RESULT ")]
    if not rows:
        raise ValueError(f"{path} has no RESULT line")
    return json.loads(rows[-1][len("RESULT "):])


def judge(out_a, out_b, figures, expect, tolerance, contended_below):
    """Exit status: 0 the shares hold, 1 they do not (or a figure is missing), 3 not contended."""
    try:
        ra, rb = last_result(out_a), last_result(out_b)
        sa, sb = float(ra["solo_tokens_per_s"]), float(rb["solo_tokens_per_s"])
        ja, jb = float(ra["joint_tokens_per_s"]), float(rb["joint_tokens_per_s"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"transformers shares: cannot read the two results: {type(e).__name__}: {e}")
        return 1
    if sa <= 0 or sb <= 0:
        print(f"transformers shares: a solo rate is zero (a {sa:.0f}, b {sb:.0f} tokens/s)")
        return 1
    fa, fb = ja / sa, jb / sb
    together = fa + fb
    share = fa / together if together > 0 else 0.0
    print(f"tokens/s alone: 30% tenant {sa:.0f}, 70% tenant {sb:.0f}; together: {ja:.0f} and {jb:.0f} "
          f"({fa:.2f} and {fb:.2f} of their solo rates, {together:.2f} in all)")
    if figures:
        with open(figures, "a") as f:
            f.write(f"transformers\t30% tenant alone\t{sa:.0f}\ttokens/s\n"
                    f"transformers\t70% tenant alone\t{sb:.0f}\ttokens/s\n"
                    f"transformers\t30% tenant beside the 70%\t{ja:.0f}\ttokens/s\n"
                    f"transformers\t70% tenant beside the 30%\t{jb:.0f}\ttokens/s\n"
                    f"transformers\tthe pair together, in solo rates\t{together:.2f}\tof one solo rate\n"
                    f"shares\ttransformers 30/70: 30% tenant's part\t{share:.3f}\tof the device\n")
    if together >= contended_below:
        print(f"not contended: together the pair got {together:.2f} of a solo rate (at least "
              f"{contended_below:g}: the GPU had room for both), so the shares decide nothing; "
              f"30% tenant's part {share:.3f}")
        return 3
    ok = abs(share - expect) <= tolerance
    print(f"contended ({together:.2f} of a solo rate together): the 30% tenant got {share:.3f} "
          f"(wanted {expect:.2f} +- {tolerance:.2f}): {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


# ----------------------------------------------------------------------------------------------
# The tenant process.

def body(args, data):
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    data.update(name=args.name, tenant=os.environ.get("SLICE_TENANT"),
                compute_share=os.environ.get("SLICE_COMPUTE_SHARE"), batch=args.batch,
                prompt=args.prompt, new_tokens_per_call=args.new_tokens, layers=args.layers,
                hidden=args.hidden)
    torch = cc.import_module("torch")
    transformers = cc.import_module("transformers")
    cc.log(f"torch {torch.__version__}, transformers {transformers.__version__}")
    if not torch.cuda.is_available():
        cc.no_device("torch", "torch.cuda.is_available() is False")

    torch.manual_seed(0)
    # eos_token_id=None: no sequence stops early, so every call makes batch x new_tokens tokens.
    config = transformers.GPT2Config(n_layer=args.layers, n_embd=args.hidden, n_head=args.heads,
                                     vocab_size=VOCAB, n_positions=args.prompt + args.new_tokens + 16,
                                     bos_token_id=0, eos_token_id=None, pad_token_id=0)
    built = time.monotonic()
    previous = torch.get_default_dtype()
    try:  # initialised on the GPU in fp16: no 300 M parameters initialised on the CPU first
        torch.set_default_dtype(torch.float16)
        with torch.device("cuda"):
            model = transformers.GPT2LMHeadModel(config)
    except Exception as e:  # an older torch or transformers: the slow way
        cc.log(f"building on the GPU failed ({type(e).__name__}: {e}); building on the CPU")
        torch.set_default_dtype(previous)
        model = transformers.GPT2LMHeadModel(config).half().to("cuda")
    finally:
        torch.set_default_dtype(previous)
    model.eval()
    prompts = torch.randint(2, VOCAB, (args.batch, args.prompt), device="cuda")
    mask = torch.ones_like(prompts)
    params = sum(p.numel() for p in model.parameters())
    data["params_m"] = round(params / 1e6, 1)
    cc.log(f"model: {params / 1e6:.1f} M parameters ({next(model.parameters()).dtype}) on "
           f"{torch.cuda.get_device_name(0)}, built in {time.monotonic() - built:.1f} s")

    def generate():
        with torch.no_grad():
            out = model.generate(input_ids=prompts, attention_mask=mask, max_new_tokens=args.new_tokens,
                                 do_sample=False, use_cache=False, pad_token_id=0)
        torch.cuda.synchronize()
        return (out.shape[1] - args.prompt) * out.shape[0]

    warm = time.monotonic()
    per_call, call_s = 0, 0.0
    for _ in range(2):
        t0 = time.monotonic()
        per_call = generate()
        call_s = time.monotonic() - t0
    cc.expect(per_call > 0, "model.generate() produced no new tokens in the warm-up")
    free, total = torch.cuda.mem_get_info()
    data.update(tokens_per_call=per_call, call_s=call_s, peak_allocated_bytes=torch.cuda.max_memory_allocated(),
                free_bytes=free, total_bytes=total)
    cc.log(f"warm-up: 2 calls in {time.monotonic() - warm:.2f} s; a call {call_s:.3f} s, {per_call} tokens; "
           f"peak allocated {cc.fmt_bytes(data['peak_allocated_bytes'])}; mem_get_info free "
           f"{cc.fmt_bytes(free)} of {cc.fmt_bytes(total)}")

    if args.plan_file:
        write_atomically(args.ready_file, json.dumps(
            {"name": args.name, "pid": os.getpid(), "call_s": call_s, "tokens_per_call": per_call,
             "params_m": data["params_m"]}))
        cc.log(f"ready ({args.ready_file}); waiting for the plan ({args.plan_file})")
        deadline = time.monotonic() + args.plan_timeout
        while not os.path.exists(args.plan_file):
            cc.expect(time.monotonic() < deadline, f"no plan in {args.plan_file} after {args.plan_timeout:.0f} s")
            time.sleep(0.05)
        with open(args.plan_file) as f:
            plan = json.load(f)
        windows = [(kind, float(s), float(e)) for kind, s, e in plan["windows"][args.name]]
    else:
        now = time.time()
        windows = [("solo", now, now + args.seconds)]

    for kind, start, end in windows:
        measured = measure(generate, start, end)
        data[kind] = measured
        data[f"{kind}_tokens_per_s"] = measured["tokens_per_s"]
        cc.log(f"{kind} window: {measured['tokens']:.0f} tokens in {measured['seconds']:.2f} s: "
               f"{measured['tokens_per_s']:.0f} tokens/s over {measured['calls']} calls "
               f"(median call {measured['call_median_s']:.3f} s), began {measured['late_s'] * 1000:.0f} ms late")
        cc.expect(measured["tokens"] > 0, f"generated no tokens inside the {kind} window")
    return ", ".join(f"{kind} {data[f'{kind}_tokens_per_s']:.0f} tokens/s" for kind, _, _ in windows)


def measure(generate, start, end):
    wait = start - time.time()
    cc.expect(wait < 600, f"a window starts {wait:.0f} s from now")
    if wait > 0:
        time.sleep(wait)
    begun = time.time()
    late = max(0.0, begun - start)
    cc.expect(begun < end, f"missed the window: ready {late:.1f} s after its start")
    tokens, calls, durations = 0.0, 0, []
    while True:
        t0 = time.time()
        if t0 >= end:
            break
        made = generate()
        t1 = time.time()
        calls += 1
        durations.append(t1 - t0)
        inside = (min(t1, end) - max(t0, start)) / (t1 - t0) if t1 > t0 else 1.0
        tokens += made * max(0.0, min(1.0, inside))
    seconds = end - max(start, begun)
    return {"tokens": round(tokens, 1), "seconds": round(seconds, 3),
            "tokens_per_s": round(tokens / seconds, 2) if seconds > 0 else 0.0, "calls": calls,
            "call_median_s": statistics.median(durations) if durations else 0.0,
            "call_max_s": max(durations) if durations else 0.0, "late_s": round(late, 4)}


def main():
    p = cc.parser(__doc__.split("\n\n")[0])
    p.add_argument("--name", choices=["a", "b"], default="a", help="which tenant of the plan this is")
    p.add_argument("--ready-file", help="written (JSON) once the model is loaded and warm")
    p.add_argument("--plan-file", help="the windows to measure, written by the orchestrator")
    p.add_argument("--plan-timeout", type=float, default=150.0, help="seconds to wait for the plan")
    p.add_argument("--seconds", type=float, default=10.0, help="without a plan: one window this long")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--prompt", type=int, default=64, help="prompt length in tokens")
    p.add_argument("--new-tokens", type=int, default=16, help="max_new_tokens")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--make-plan", nargs=2, metavar=("READY_A", "READY_B"))
    p.add_argument("--plan-out")
    p.add_argument("--solo", type=float, default=4.0)
    p.add_argument("--joint", type=float, default=12.0)
    p.add_argument("--lead", type=float, default=1.0)
    p.add_argument("--judge", nargs=2, metavar=("OUT_A", "OUT_B"))
    p.add_argument("--figures")
    p.add_argument("--expect", type=float, default=0.30)
    p.add_argument("--tolerance", type=float, default=0.10)
    p.add_argument("--contended-below", type=float, default=1.5)
    args = p.parse_args()
    if args.make_plan:
        if not args.plan_out:
            p.error("--make-plan needs --plan-out")
        make_plan(*args.make_plan, args.plan_out, args.solo, args.joint, args.lead)
        return
    if args.judge:
        sys.exit(judge(*args.judge, args.figures, args.expect, args.tolerance, args.contended_below))
    if args.plan_file and not args.ready_file:
        p.error("--plan-file needs --ready-file")
    cc.run(f"transformers-shares-{args.name}", body, args)


if __name__ == "__main__":
    main()
