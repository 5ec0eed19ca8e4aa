"""The trainer's forward + backward with each distinct prompt run once, against the one-pass forward.

    python bench/shared_prefix_update.py                      # SmolLM2-135M LoRA r16, 8 prompts x 4, 70 + 22 tokens
    python bench/shared_prefix_update.py --mode full --rounds 5 --threads 1 --out /tmp/shared_prefix.json
    python bench/shared_prefix_update.py --response-min 6 --response 64   # ragged responses: length buckets

The batch of bench/vs_trl.py's SmolLM2 case: ``prompts`` distinct random prompts of ``--prompt`` tokens,
``--group`` rows each, responses of ``--response`` tokens; ``--tail N`` appends N random tokens to
each row's prompt (rows then share only the prefix, like a relay's later turns); ``--response-min M``
draws each response's length uniformly from M..``--response`` (ragged, as sampled answers are). One
round times ``response_logprobs`` (the trainer's log-prob pass, satseq/rollout/logprobs.py) and its
backward in three layouts interleaved in one process: one padded layout (A), shared prefixes in one
padded continuation (B, satseq/rollout/prefix_sharing.py), and shared prefixes with rows of similar
length run together (C, satseq/rollout/length_buckets.py, what the trainer does); the ratios of
medians against A are printed with the per-round times. Also checks that all give the same log-probs.
Timings are only meaningful on an otherwise idle machine.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=["lora", "full"], default="lora")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--prompt", type=int, default=70)
    ap.add_argument("--response", type=int, default=22)
    ap.add_argument("--response-min", type=int, default=None,
                    help="draw each response's length from this..--response (default: all --response)")
    ap.add_argument("--tail", type=int, default=0,
                    help="tokens after the shared prompt that differ per row (a relay's earlier answers)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    import torch

    from satseq.models.agents import AgentPool
    from satseq.models.loading import load_causal_lm
    from satseq.rollout import length_buckets
    from satseq.rollout import logprobs as lpmod
    from satseq.rollout import prefix_sharing
    from satseq.utils.io import write_json

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model, tok = load_causal_lm("smollm2")
    pool = AgentPool.full(["policy"], [model], tok) if a.mode == "full" else \
        AgentPool.lora(["policy"], model, tok, r=16, alpha=32, dropout=0.0)
    m = pool.module("policy")
    g = torch.Generator().manual_seed(0)
    V = model.config.vocab_size
    distinct = [torch.randint(0, V, (a.prompt,), generator=g).tolist() for _ in range(a.prompts)]
    prompts = [p + torch.randint(0, V, (a.tail,), generator=g).tolist() for p in distinct for _ in range(a.group)]
    low = a.response if a.response_min is None else a.response_min
    lengths = torch.randint(low, a.response + 1, (len(prompts),), generator=g).tolist()
    responses = [torch.randint(0, V, (n,), generator=g).tolist() for n in lengths]
    plan, cost = prefix_sharing.sharing_plan, length_buckets.CALL_COST["cpu"]
    layouts = {"one-pass": (lambda d, p, r: None, 10**9), "shared-prefix": (plan, 10**9),
               "shared+buckets": (plan, cost)}
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in layouts}
    lps = {}
    for r in range(a.rounds):
        for name, (rule, bucket_cost) in layouts.items():
            prefix_sharing.sharing_plan = rule
            length_buckets.CALL_COST["cpu"] = bucket_cost
            t0 = time.perf_counter()
            lp, _ = lpmod.response_logprobs(m, prompts, responses, tok.pad_token_id)
            t1 = time.perf_counter()
            lp.sum().backward()
            t2 = time.perf_counter()
            m.zero_grad(set_to_none=True)
            times[name].append((t1 - t0, t2 - t0))
            lps[name] = lp.detach()
            print(f"round {r} {name:>14}: forward {t1 - t0:6.2f} s  forward+backward {t2 - t0:6.2f} s", flush=True)
    prefix_sharing.sharing_plan = plan
    length_buckets.CALL_COST["cpu"] = cost
    gap = max(float((lps["one-pass"] - lps[k]).abs().max()) for k in layouts)
    med = {k: (statistics.median(x for x, _ in v), statistics.median(y for _, y in v)) for k, v in times.items()}
    res = {"mode": a.mode, "rows": len(prompts), "distinct_prompts": a.prompts, "prompt_tokens": a.prompt, "tail": a.tail,
           "response_tokens": [low, a.response], "response_mean": statistics.mean(lengths), "threads": a.threads,
           "rounds": a.rounds, "max_logprob_gap": gap, "median_s": med, "rounds_s": times,
           "ratio_forward": {k: med["one-pass"][0] / med[k][0] for k in layouts},
           "ratio_forward_backward": {k: med["one-pass"][1] / med[k][1] for k in layouts}}
    print(f"\n{a.mode}, {len(prompts)} rows = {a.prompts} prompts x {a.group}, {a.prompt} + {a.tail} + "
          f"{low}..{a.response} (mean {statistics.mean(lengths):.1f}) tokens, {a.threads} thread(s), medians of {a.rounds}:")
    print("| layout | forward | forward + backward | ratio (fwd / fwd+bwd) |\n|---|---|---|---|")
    for k, (f, fb) in med.items():
        print(f"| {k} | {f:.2f} s | {fb:.2f} s | {res['ratio_forward'][k]:.2f}x / {res['ratio_forward_backward'][k]:.2f}x |")
    print(f"max |log-prob difference| against the one-pass layout: {gap:.1e}")
    if a.out:
        write_json(a.out, res)


if __name__ == "__main__":
    main()
