"""Token throughput of a small causal LM under a compute share.

    python3 tests/gpu/frameworks/transformers_shares.py [--seconds S] [--start-at UNIX_TIME]
        [--batch 8] [--new-tokens 32] [--allow-missing] [--timeout S]

Builds a GPT-2 style model from a config with random weights (4 layers, 256 wide, 4 heads, a
vocabulary of 1000; nothing is downloaded), puts it on the GPU, warms up, sleeps until --start-at
(a wall-clock instant shared by the processes compared, so that they measure the same window), then
for --seconds runs model.generate() (greedy, a batch of random prompts of 16 tokens, 32 new tokens
each) in a loop and counts the tokens generated inside [start, start + S]; a call that straddles the
end counts in proportion to its time inside the window. RESULT: tokens, seconds, tokens_per_s.
Passes when it generated anything: comparing two tenants' rates is the orchestrator's job.
"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_common as cc  # noqa: E402

PROMPT_LEN = 16
VOCAB = 1000
MAX_WAIT_S = 300.0  # --start-at further than this in the future is a mistake


def body(args, data):
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    data.update(tenant=os.environ.get("SLICE_TENANT"), compute_share=os.environ.get("SLICE_COMPUTE_SHARE"),
                batch=args.batch, new_tokens_per_call=args.new_tokens)
    torch = cc.import_module("torch")
    transformers = cc.import_module("transformers")
    cc.log(f"torch {torch.__version__}, transformers {transformers.__version__}")
    if not torch.cuda.is_available():
        cc.no_device("torch", "torch.cuda.is_available() is False")

    torch.manual_seed(0)
    # eos_token_id=None: no sequence stops early, so every call makes batch x new_tokens tokens.
    config = transformers.GPT2Config(n_layer=4, n_embd=256, n_head=4, vocab_size=VOCAB,
                                     n_positions=PROMPT_LEN + args.new_tokens + 16,
                                     bos_token_id=0, eos_token_id=None, pad_token_id=0)
    model = transformers.GPT2LMHeadModel(config).to("cuda").eval()
    prompts = torch.randint(2, VOCAB, (args.batch, PROMPT_LEN), device="cuda")
    mask = torch.ones_like(prompts)
    cc.log(f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters on "
           f"{torch.cuda.get_device_name(0)}")

    def generate():
        with torch.no_grad():
            out = model.generate(input_ids=prompts, attention_mask=mask, max_new_tokens=args.new_tokens,
                                 do_sample=False, pad_token_id=0)
        torch.cuda.synchronize()
        return (out.shape[1] - PROMPT_LEN) * out.shape[0]

    warm = time.monotonic()
    per_call = 0
    for _ in range(2):
        per_call = generate()
    cc.expect(per_call > 0, "model.generate() produced no new tokens in the warm-up")
    data["tokens_per_call"] = per_call
    cc.log(f"warm-up: 2 calls in {time.monotonic() - warm:.2f} s, {per_call} tokens per call")

    start_at = args.start_at if args.start_at is not None else time.time()
    wait = start_at - time.time()
    cc.expect(wait <= MAX_WAIT_S, f"--start-at is {wait:.0f} s away (more than {MAX_WAIT_S:.0f} s)")
    if wait > 0:
        cc.log(f"sleeping {wait:.2f} s until the common start")
        time.sleep(wait)
    start, end = start_at, start_at + args.seconds
    begun = time.time()
    late = max(0.0, begun - start)
    data.update(start_at=start_at, late_s=late)
    cc.expect(begun < end, f"missed the window: ready {late:.1f} s after the start, window {args.seconds} s")
    if late > 0.5:
        cc.log(f"warning: started {late:.2f} s late; the rate is over the {end - begun:.1f} s left")

    tokens = 0.0
    calls = 0
    durations = []
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
    rate = tokens / seconds if seconds > 0 else 0.0
    data.update(tokens=round(tokens, 1), seconds=round(seconds, 3), tokens_per_s=round(rate, 2),
                calls=calls, call_median_s=statistics.median(durations) if durations else None,
                call_max_s=max(durations) if durations else None)
    cc.log(f"{tokens:.1f} tokens in {seconds:.2f} s: {rate:.1f} tokens/s over {calls} calls "
           f"(median call {data['call_median_s'] or 0:.3f} s)")
    cc.expect(tokens > 0, "generated no tokens inside the window")
    return f"{rate:.1f} tokens/s"


def main():
    p = cc.parser(__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=20.0, help="length of the window (default 20)")
    p.add_argument("--start-at", type=float, default=None,
                   help="UNIX time at which the window starts (default: as soon as warmed up)")
    p.add_argument("--batch", type=int, default=8, help="prompts per call (default 8)")
    p.add_argument("--new-tokens", type=int, default=32, help="max_new_tokens (default 32)")
    args = p.parse_args()
    # The watchdog must cover the wait for the common start and the window itself.
    wait = max(0.0, (args.start_at or time.time()) - time.time())
    args.timeout = max(args.timeout, wait + args.seconds + 60.0)
    cc.run("transformers-shares", body, args)


if __name__ == "__main__":
    main()
