"""Rollout throughput: satseq's engine against transformers' ``generate``, this machine's roofline and vLLM.

    python bench/rollout/throughput.py tiny [--batch 128] [--tokens 40] [--threads 2] [--repeats 3]
    python bench/rollout/throughput.py roofline [--batch 32] [--tokens 64] [--threads 1] [--repeats 3] [--out DIR]
    .venv-vllm/bin/python bench/rollout/throughput.py engines [--batch 32] [--tokens 64] [--threads 2] [--repeats 3] [--out DIR]

``tiny`` (``make bench``): decode throughput of the rollout engine vs. transformers' ``generate`` on the
embedded model. Prints tokens/s for each (sampled, T=1). Run it alone: the 2 cores are easily
oversubscribed.

``roofline``: SmolLM2-135M rollout against its CPU roofline and against transformers' ``generate``.

1. **Roofline.** Measures this machine's matmul peak (a large square GEMM, fp32 and bf16, best of
   several) and the memory bandwidth (a large copy), then derives the fastest possible time for the
   shape: the prefill (each distinct prompt's P tokens through every layer once, the LM head at the
   last position only) plus T decode steps, each step costing ``max(FLOPs / peak, weight bytes / bandwidth)``.
   FLOPs per token = 2 × (layer weights + LM head) + attention (4 · S · d · H per layer at context S).
2. **Rollout.** The engine (`HFEngine`, fused Llama path) vs ``model.generate(do_sample=True)``,
   B rows (B / group distinct chat prompts × group samples, as a GRPO batch) × exactly T sampled
   tokens (EOS ignored by both), interleaved A, B, A, B in one
   process, in bf16 (the model cast to bf16) and in fp32; reports tok/s, the ratio of medians and the
   share of the roofline.

Run it on an idle machine when you can; the figures in docs/results.md say under what load they were
taken. Writes ``roofline.json`` under ``--out``.

``engines``: SmolLM2-135M rollout: satseq's engine, vLLM and transformers' ``generate``, fp32 and bf16,
interleaved. Runs in the venv that has vLLM (``make setup-vllm``). One process, one shape: B rows
(B / group distinct chat prompts × group samples, as a GRPO batch) × exactly T sampled tokens (EOS
ignored) at T = 1, as ``roofline``. The engines take turns (satseq, vLLM, generate; fp32 then bf16) for
``--repeats`` rounds after one warm-up round; each figure is the median. vLLM's prefix cache is reset
before each timed call, so no call reuses another's prompts. Prints tok/s, the ratios and the share of
this machine's roofline (``roofline``'s model), and the cost of keeping vLLM in sync:

* ``reload``: new full weights into the running engine (``reload_weights``), what one engine shared by
  K full agents pays when the acting agent changes;
* ``start``: starting a second engine, what one engine per agent pays once per agent (and its memory
  for as long as the run lasts).

Writes ``rollout_engines.json`` under ``--out``.

The three were bench/engine_throughput.py, bench/roofline.py and bench/rollout_engines.py; they share
the prompts, the roofline model and the interleaving.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where it is used: --help stays fast
    import torch


def gemm_peak(dtype: torch.dtype, n: int = 2048, repeats: int = 5) -> float:
    """Best FLOP/s of an n×n×n matmul."""
    import torch

    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    torch.matmul(a, b)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.matmul(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2 * n ** 3 / best


def bandwidth(mb: int = 512, repeats: int = 5) -> float:
    """Best bytes/s of a large copy (read + write)."""
    import torch

    src = torch.empty(mb * 2 ** 20, dtype=torch.uint8).fill_(1)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t0)
    return 2 * src.numel() / best


def grpo_chat_batch(tok, batch: int, group: int) -> tuple[list[list[int]], list[list[int]]]:
    """``batch // group`` distinct chat prompts (token ids) and the batch of ``group`` copies of each."""
    distinct = []
    for i in range(batch // group):
        chat = [{"role": "user", "content": f"What is {17 + 7 * i} + {45 + 3 * i}? Answer with the number only, "
                                            "then explain briefly."}]
        text = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        distinct.append(tok(text, add_special_tokens=False)["input_ids"])
    return distinct, [p for p in distinct for _ in range(group)]


def roofline_seconds(cfg, batch: int, prompt: int, tokens: int, peak: float, bw: float, bytes_per: int,
                     prefill_rows: int | None = None) -> dict:
    """The fastest time for ``batch`` rows × ``tokens`` sampled after a ``prompt``-token prompt; the
    prefill runs once per distinct prompt (``prefill_rows``; an engine can share a group's prefill)."""
    prefill_rows = batch if prefill_rows is None else prefill_rows
    d, L, V = cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size
    h, kv = cfg.num_attention_heads, cfg.num_key_value_heads
    hd = d // h
    layer_params = L * (d * (h + 2 * kv) * hd + h * hd * d + 3 * d * cfg.intermediate_size)
    head_params = V * d

    def attn_flops(ctx):  # q·K and p·V for every head at context ctx
        return L * 4 * ctx * hd * h

    prefill = prefill_rows * (prompt * 2 * layer_params + 2 * head_params + sum(attn_flops(s + 1) for s in range(prompt)))
    t_prefill = prefill / peak
    t_decode = 0.0
    for t in range(tokens - 1):  # the first token comes from the prefill's logits
        flops = batch * (2 * (layer_params + head_params) + attn_flops(prompt + t + 1))
        weight_bytes = (layer_params + head_params) * bytes_per
        t_decode += max(flops / peak, weight_bytes / bw)
    return {"prefill_s": t_prefill, "decode_s": t_decode, "total_s": t_prefill + t_decode,
            "tok_s": batch * tokens / (t_prefill + t_decode)}


def tiny(a) -> None:
    """The embedded model: ``HFEngine`` vs ``generate`` (was bench/engine_throughput.py)."""
    import torch

    from satseq.models.tiny import build_tiny_model
    from satseq.rollout.hf_engine import HFEngine
    from satseq.rollout.types import SamplingParams

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


def roofline(a) -> None:
    """SmolLM2-135M: ``HFEngine`` vs ``generate`` and the roofline (was bench/roofline.py)."""
    import torch

    torch.set_num_threads(a.threads)
    from satseq.models.loading import load_causal_lm
    from satseq.rollout.hf_engine import HFEngine
    from satseq.rollout.types import SamplingParams

    model32, tok = load_causal_lm("smollm2")
    model32.eval()
    models = {"bf16": _cast(model32, torch.bfloat16), "fp32": model32}
    from satseq.rollout.padding import left_pad

    distinct, prompts = grpo_chat_batch(tok, a.batch, a.group)
    ids, attn = left_pad(prompts, tok.pad_token_id)
    P = ids.shape[1]
    peaks = {"fp32": max(gemm_peak(torch.float32) for _ in range(2)),
             "bf16": max(gemm_peak(torch.bfloat16) for _ in range(2))}
    bw = bandwidth()
    roof = {k: roofline_seconds(model32.config, a.batch, P, a.tokens, peaks[k], bw, 2 if k == "bf16" else 4,
                                prefill_rows=len(distinct)) for k in peaks}
    print(f"B{a.batch} = {len(distinct)} prompts × {a.group} samples; threads {a.threads}; matmul peak fp32 {peaks['fp32'] / 1e9:.0f} GFLOP/s, bf16 {peaks['bf16'] / 1e9:.0f} "
          f"GFLOP/s; copy bandwidth {bw / 1e9:.1f} GB/s; prompts padded to {P} tokens")
    for k, r in roof.items():
        print(f"roofline {k}: B{a.batch} × {a.tokens}: {r['total_s']:.2f} s ({r['tok_s']:.0f} tok/s; prefill "
              f"{r['prefill_s']:.2f} s)")

    eng = HFEngine(tok, batch_size=a.batch)
    eng.eos_ids = set()  # exactly T tokens, like min_new_tokens below
    sp = SamplingParams(max_new_tokens=a.tokens)

    def ours(m):
        out = eng.generate(m, prompts, sp, torch.Generator().manual_seed(0))
        assert all(len(g.response_ids) == a.tokens for g in out)

    def hf(m):
        with torch.no_grad():
            m.generate(ids, attention_mask=attn, do_sample=True, max_new_tokens=a.tokens,
                       min_new_tokens=a.tokens, pad_token_id=tok.pad_token_id, top_k=0, top_p=1.0)

    runs = {(k, name): [] for k in models for name in ("satseq", "hf_generate")}
    for k, m in models.items():  # warm-up
        ours(m), hf(m)
    for _ in range(a.repeats):
        for k, m in models.items():
            for name, fn in (("satseq", ours), ("hf_generate", hf)):
                t0 = time.perf_counter()
                fn(m)
                runs[(k, name)].append(time.perf_counter() - t0)
    result = {"threads": a.threads, "batch": a.batch, "group": a.group, "tokens": a.tokens, "prompt_tokens": P,
              "peak_flops": peaks, "bandwidth": bw, "roofline": roof, "runs": {}}
    for k in models:
        s, h = statistics.median(runs[(k, "satseq")]), statistics.median(runs[(k, "hf_generate")])
        tps = a.batch * a.tokens / s
        result["runs"][k] = {"satseq_s": runs[(k, "satseq")], "hf_generate_s": runs[(k, "hf_generate")],
                             "satseq_tok_s": tps, "hf_tok_s": a.batch * a.tokens / h, "ratio": h / s,
                             "share_of_roofline": tps / roof[k]["tok_s"]}
        print(f"{k}: satseq {tps:.0f} tok/s, HF generate {a.batch * a.tokens / h:.0f} tok/s: {h / s:.2f}×; "
              f"{100 * tps / roof[k]['tok_s']:.0f}% of the roofline (medians of {a.repeats}, interleaved)")
    if a.profile:
        from satseq.rollout.fused_decode import FusedWeights

        t0 = time.perf_counter()  # what every timed satseq call above paid once (the models alternate)
        FusedWeights(models["fp32"], torch.float32, a.batch)
        print(f"building the fused, packed fp32 weights: {time.perf_counter() - t0:.2f} s per rollout after an update")
        profile_rollout(lambda: ours(models["fp32"]), a.batch * a.tokens)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "roofline.json").write_text(json.dumps(result, indent=1))


def engines(a) -> None:
    """SmolLM2-135M: satseq, vLLM and ``generate`` (was bench/rollout_engines.py)."""
    import torch

    import os

    os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
    torch.set_num_threads(a.threads)
    from satseq.models.loading import load_causal_lm
    from satseq.rollout.hf_engine import HFEngine
    from satseq.rollout.padding import left_pad
    from satseq.rollout.types import SamplingParams
    from satseq.config.schema import VllmConfig
    from satseq.rollout.vllm_engine import VLLMEngine

    model32, tok = load_causal_lm("smollm2")
    model32.eval()
    models = {k: model32 if k == "fp32" else _cast(model32, torch.bfloat16) for k in a.precisions}
    distinct, prompts = grpo_chat_batch(tok, a.batch, a.group)
    ids, attn = left_pad(prompts, tok.pad_token_id)
    P = ids.shape[1]
    peaks = {"fp32": gemm_peak(torch.float32), "bf16": gemm_peak(torch.bfloat16)}
    bw = bandwidth()
    roof = {k: roofline_seconds(model32.config, a.batch, P, a.tokens, peaks[k], bw, 2 if k == "bf16" else 4,
                                prefill_rows=len(distinct)) for k in peaks}
    print(f"B{a.batch} = {len(distinct)} prompts × {a.group} samples × {a.tokens} tokens; threads {a.threads}; "
          f"prompts padded to {P} tokens; roofline fp32 {roof['fp32']['tok_s']:.0f} tok/s, bf16 "
          f"{roof['bf16']['tok_s']:.0f} tok/s", flush=True)

    ours = HFEngine(tok, batch_size=a.batch)
    ours.eos_ids = set()  # exactly T tokens
    sp = SamplingParams(max_new_tokens=a.tokens)
    t0 = time.perf_counter()
    settings = VllmConfig(enforce_eager=not a.compile)
    vllm = {k: VLLMEngine(tok, settings=settings, dtype=k.replace("fp32", "float32").replace("bf16", "bfloat16"))
            for k in models}
    for e in vllm.values():
        e.ignore_eos = True
    starts = {}

    def run_ours(k):
        out = ours.generate(models[k], prompts, sp, torch.Generator().manual_seed(0))
        assert all(len(g.response_ids) == a.tokens for g in out)

    def run_vllm(k):
        e = vllm[k]
        if e._engine is not None:
            e._engine.llm.reset_prefix_cache()
        out = e.generate(models[k], prompts, sp, torch.Generator().manual_seed(0))
        assert all(len(g.response_ids) == a.tokens for g in out)

    def run_generate(k):
        with torch.no_grad():
            models[k].generate(ids, attention_mask=attn, do_sample=True, max_new_tokens=a.tokens,
                               min_new_tokens=a.tokens, pad_token_id=tok.pad_token_id, top_k=0, top_p=1.0)

    engines = {"satseq": run_ours, "vllm": run_vllm, "generate": run_generate}
    for k in models:  # warm-up: vLLM starts here (timed), every path runs once
        for name, fn in engines.items():
            t0 = time.perf_counter()
            fn(k)
            if name == "vllm":
                starts[k] = time.perf_counter() - t0
    runs = {(k, n): [] for k in models for n in engines}
    for _ in range(a.repeats):
        for k in models:
            for name, fn in engines.items():
                t0 = time.perf_counter()
                fn(k)
                runs[(k, name)].append(time.perf_counter() - t0)
    # the sync: perturbed full weights into the running fp32 engine; a second engine started
    e = vllm[a.precisions[0]]
    target = models[a.precisions[0]]
    reload_s = []
    for _ in range(3):
        with torch.no_grad():
            next(target.parameters()).mul_(1.0)  # bumps a version counter: the engine must reload
        t0 = time.perf_counter()
        e.sync(target)
        reload_s.append(time.perf_counter() - t0)
    result = {"threads": a.threads, "vllm_compiled": a.compile, "batch": a.batch, "group": a.group, "tokens": a.tokens, "prompt_tokens": P,
              "peak_flops": peaks, "bandwidth": bw, "roofline": roof, "vllm_first_call_s": starts,
              "vllm_reload_s": statistics.median(reload_s), "runs": {}}
    print("\n| precision | engine | tok/s | × generate | × satseq | share of roofline |\n|---|---|---|---|---|---|")
    for k in models:
        med = {n: statistics.median(runs[(k, n)]) for n in engines}
        tps = {n: a.batch * a.tokens / med[n] for n in engines}
        result["runs"][k] = {n: {"seconds": runs[(k, n)], "tok_s": tps[n], "share_of_roofline": tps[n] / roof[k]["tok_s"]}
                             for n in engines}
        for n in engines:
            print(f"| {k} | {n} | {tps[n]:.0f} | {tps[n] / tps['generate']:.2f} | {tps[n] / tps['satseq']:.2f} | "
                  f"{100 * tps[n] / roof[k]['tok_s']:.0f} % |")
    print(f"\nvLLM ({'compiled' if a.compile else 'eager'}): first call (engine start + warm-up) "
          + ", ".join(f"{v:.1f} s {k}" for k, v in starts.items())
          + f"; full-weight reload into the running engine {result['vllm_reload_s']:.2f} s (median of 3)")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "rollout_engines.json").write_text(json.dumps(result, indent=1))


def profile_rollout(fn, tokens: int) -> None:
    """Self time by operator of one call (weights already built), and the tok/s of that call."""
    from torch.profiler import ProfilerActivity, profile

    fn()  # build the fused weights for this model first: the profile is the decode itself
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        fn()
        wall = time.perf_counter() - t0
    rows = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in rows)
    print(f"profile of one fp32 satseq rollout, weights already built: {wall:.2f} s under the profiler "
          f"({tokens / wall:.0f} tok/s)")
    print("| operator | calls | self time | share |\n|---|---|---|---|")
    for e in rows[:8]:
        print(f"| {e.key} | {e.count} | {e.self_cpu_time_total / 1e6:.2f} s | {100 * e.self_cpu_time_total / total:.0f} % |")


def _cast(model, dtype):
    import copy

    return copy.deepcopy(model).to(dtype)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="bench", required=True)
    t = sub.add_parser("tiny", help="the embedded model: satseq's engine vs generate (make bench)")
    t.add_argument("--batch", type=int, default=128)
    t.add_argument("--tokens", type=int, default=40)
    t.add_argument("--threads", type=int, default=2)
    t.add_argument("--repeats", type=int, default=3)
    r = sub.add_parser("roofline", help="SmolLM2-135M: satseq's engine vs generate and this machine's roofline")
    r.add_argument("--batch", type=int, default=32)
    r.add_argument("--group", type=int, default=4, help="samples per prompt (GRPO's group): batch/group distinct prompts")
    r.add_argument("--tokens", type=int, default=64)
    r.add_argument("--threads", type=int, default=1)
    r.add_argument("--repeats", type=int, default=3)
    r.add_argument("--out", default="outputs/bench_roofline")
    r.add_argument("--profile", action="store_true",
                   help="also print where one fp32 satseq rollout spends its time (torch.profiler, by operator)")
    e = sub.add_parser("engines", help="SmolLM2-135M: satseq's engine, vLLM and generate (the venv with vLLM)")
    e.add_argument("--batch", type=int, default=32)
    e.add_argument("--group", type=int, default=4, help="samples per prompt: batch/group distinct prompts")
    e.add_argument("--tokens", type=int, default=64)
    e.add_argument("--threads", type=int, default=2)
    e.add_argument("--repeats", type=int, default=3)
    e.add_argument("--out", default="outputs/bench_rollout_engines")
    e.add_argument("--compile", action="store_true", help="vLLM compiles the model (rollout.vllm.enforce_eager=false)")
    e.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    a = ap.parse_args(argv)
    {"tiny": tiny, "roofline": roofline, "engines": engines}[a.bench](a)


if __name__ == "__main__":
    main()
