"""Decode throughput of the rollout engine vs. transformers' ``generate`` on the embedded model.

    .venv/bin/python bench/engine_throughput.py [--batch 128] [--tokens 40] [--threads 2]

Prints tokens/s for each (sampled, T=1). Run it alone: the 2 cores are easily oversubscribed.
"""
from __future__ import annotations

import argparse
import time

import torch

from satseq.models.tiny import build_tiny_model
from satseq.rollout.hf_engine import HFEngine
from satseq.rollout.types import SamplingParams


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    model, tok = build_tiny_model()
    model.eval()
    prompt = tok("____|____|454+422=", add_special_tokens=False)["input_ids"]
    eng = HFEngine(tok, batch_size=a.batch)
    sp = SamplingParams(max_new_tokens=a.tokens)
    ids = torch.tensor([prompt] * a.batch)

    def ours():
        eng.generate(model, [prompt] * a.batch, sp, torch.Generator().manual_seed(0))

    def hf():
        with torch.no_grad():
            model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, max_new_tokens=a.tokens,
                           min_new_tokens=a.tokens, pad_token_id=tok.pad_token_id)

    for name, fn in (("satseq HFEngine", ours), ("transformers generate", hf)):
        fn()  # warm-up
        times = []
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        best = min(times)
        print(f"{name:24s} batch {a.batch} × {a.tokens} tokens: {best:.2f} s, {a.batch * a.tokens / best:.0f} tok/s")


if __name__ == "__main__":
    main()
