"""One GRPO update on SmolLM2-135M with ``trainer.autocast`` off vs ``bfloat16``, interleaved.

    python bench/autocast_update.py [--batch 16] [--prompt 36] [--response 64] [--threads 1] [--repeats 3]

LoRA r16 on q, k, v, o; one on-policy mini-batch through ``clipped_pg_update`` (GRPO's update), on
random tokens. Reports the median update time of each setting, their ratio, and how far the bf16
log-probs are from the fp32 ones. Run it on an otherwise idle machine.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=36)
    ap.add_argument("--response", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    from satseq.models.agents import AgentPool
    from satseq.models.loading import load_causal_lm
    from satseq.rollout.logprobs import response_logprobs
    from satseq.update.batch import TurnBatch
    from satseq.update.clipped_pg import PGSettings, clipped_pg_update
    from satseq.utils import precision

    model, tok = load_causal_lm("smollm2")
    pool = AgentPool.lora(["policy"], model, tok, r=16, alpha=32, dropout=0.0)
    g = torch.Generator().manual_seed(0)
    V = model.config.vocab_size
    prompts = [torch.randint(0, V, (a.prompt,), generator=g).tolist() for _ in range(a.batch)]
    responses = [torch.randint(0, V, (a.response,), generator=g).tolist() for _ in range(a.batch)]
    batch = TurnBatch(prompts, responses, torch.arange(a.batch), torch.randn(a.batch, generator=g),
                      [[0.0] * a.response for _ in range(a.batch)])
    opt = torch.optim.AdamW(pool.parameters("policy"), lr=0.0)  # lr 0: every repeat sees the same weights
    times = {"off": [], "bfloat16": []}
    for _ in range(a.repeats + 1):  # the first round warms up
        for mode in times:
            precision.set_autocast(mode)
            t0 = time.perf_counter()
            clipped_pg_update(pool, "policy", opt, batch, PGSettings(mini_batch_size=a.batch), generator=g,
                              device="cpu")
            times[mode].append(time.perf_counter() - t0)
    with torch.no_grad():
        lps = {}
        for mode in times:
            precision.set_autocast(mode)
            lps[mode], mask = response_logprobs(pool.module("policy"), prompts, responses, tok.pad_token_id)
    precision.set_autocast("off")
    gap = ((lps["bfloat16"] - lps["off"]).abs() * mask).sum() / mask.sum()
    med = {m: statistics.median(t[1:]) for m, t in times.items()}
    print(f"{a.batch} x {a.prompt + a.response} tokens, LoRA r16, {a.threads} thread(s), medians of {a.repeats}:")
    print(f"  fp32 {med['off']:.2f} s, autocast bf16 {med['bfloat16']:.2f} s: bf16 takes {med['bfloat16'] / med['off']:.2f}x "
          f"the fp32 time; mean |log-prob difference| {gap:.4f}")


if __name__ == "__main__":
    main()
