"""Rollout throughput: satseq's engine against transformers' ``generate``, this machine's roofline and vLLM.

    python bench/rollout/throughput.py tiny [--batch 128] [--tokens 40] [--threads 2] [--repeats 3]
    python bench/rollout/throughput.py roofline [--batch 32] [--tokens 64] [--threads 1] [--repeats 3] [--out DIR]
    .venv-vllm/bin/python bench/rollout/throughput.py engines [--batch 32] [--tokens 64] [--threads 2] [--repeats 3]
        [--vllm eager compiled] [--lora 3] [--lora-modes adapter merged] [--out DIR]
    python bench/rollout/throughput.py kernels [--rows 32] [--threads 2] [--out DIR]
    .venv-vllm/bin/python bench/rollout/throughput.py stages [--recipe recipes/smollm2/sat_seq.yaml] [--engines hf vllm]
        [--stages 4] [--rounds 2] [--threads 2] [--out DIR] [key=value ...]
    python bench/rollout/throughput.py few-shot [--recipe recipes/smollm2/mlmt_sum3.yaml] [--problems 32] [--n 3]
        [--threads 1] [--repeats 3] [--out DIR]

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

``engines``: SmolLM2-135M rollout: satseq's engine, vLLM (eager and compiled) and transformers'
``generate``, fp32 and bf16, on the base model and with ``--lora`` LoRA r16 agents (one relay turn
each: the acting agent changes every call; vLLM serves them as per-request adapters and as merged
weights reloaded per turn, ``rollout.vllm.lora_mode``), interleaved. Runs in the venv that has vLLM (``make setup-vllm``). One process, one shape: B rows
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

``kernels``: why the decode is where it is. Each GEMM of one decode step of SmolLM2-135M (fused q/k/v,
o, fused gate/up, down, the LM head) at ``--rows`` rows, through every library kernel this torch build
has (``F.linear``, ``torch.mm`` on a pre-transposed weight, MKL's packed GEMM, oneDNN's packed linear),
fp32 and bf16, best of ``--repeats``; each against its own roofline, ``max(FLOPs / GEMM peak, weight
bytes / copy bandwidth)``, and a decode step's GEMMs summed per kernel and with the best kernel per GEMM.
Writes ``decode_gemms.json`` under ``--out``.

``few-shot``: prompts that open with the same few-shot header (a small model's two-shot prompt, as in
``recipes/smollm2/``): SmolLM2-135M, satseq's engine with the header prefilled once for the batch
(``fused_decode.MIN_SHARED_PREFIX``, the default) against every distinct prompt prefilled whole (the
engine before it), interleaved for ``--repeats`` rounds after a warm-up, fp32. The prompts are the
recipe's turns as a held-out evaluation sends them: the solve prompt (``data.prompt_template``) and,
where the recipe has them, the exact-text later turns (``mlmt.coach_prompt`` / ``refine_prompt``,
``pag.verify_prompt`` / ``revise_prompt``) filled with a fixed attempt; ``--problems`` problems of
``data.eval`` × ``--n`` samples each, the recipe's ``rollout.max_new_tokens`` and stop. Prints the median
seconds per call, the ratio, the prompt tokens prefilled each way, and whether both gave the same tokens.
Writes ``few_shot.json`` under ``--out``.

``stages``: whole training stages of a recipe (SAT-Seq's three LoRA agents on SmolLM2 by default) on
each engine: ``satseq train RECIPE rollout.engine=E`` for ``--stages`` stages in a fresh process per
run, the engines taking turns for ``--rounds`` rounds. Prints the median stage time after each run's
first stage (which starts the engine), its rollout part and the ratio to satseq's engine. Writes
``engine_stages.json`` under ``--out``.

The first three were bench/engine_throughput.py, bench/roofline.py and bench/rollout_engines.py; they share
the prompts, the roofline model and the interleaving.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING

from satseq.utils.machine import cpu_name

if TYPE_CHECKING:  # torch is imported where it is used: --help stays fast
    import torch


def gemm_peak(dtype: torch.dtype, n: int = 2048, repeats: int = 5) -> float:
    """Best FLOP/s of an n×n×n product, through ``torch.matmul`` and through ``F.linear`` (the two can
    take different library paths: on an AVX2 CPU without bf16 instructions, bf16 ``matmul`` ran at about
    1 GFLOP/s and bf16 ``F.linear`` at about 17). A path whose first call takes over 2 s is timed once."""
    import torch
    import torch.nn.functional as F

    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    best = float("inf")
    for fn in (lambda: torch.matmul(a, b), lambda: F.linear(a, b)):
        t0 = time.perf_counter()
        fn()
        first = time.perf_counter() - t0
        best = min(best, first)
        for _ in range(repeats if first < 2.0 else 0):
            t0 = time.perf_counter()
            fn()
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

    eng = HFEngine(tok, batch_size=a.batch, gemm=a.gemm)
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
        FusedWeights(models["fp32"], torch.float32, a.batch, a.gemm)
        print(f"building the fused, packed fp32 weights: {time.perf_counter() - t0:.2f} s per rollout after an update")
        profile_rollout(lambda: ours(models["fp32"]), a.batch * a.tokens)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "roofline.json").write_text(json.dumps(result, indent=1))


def engines(a) -> None:
    """SmolLM2-135M: satseq, vLLM and ``generate``, the base model and K LoRA agents (was bench/rollout_engines.py)."""
    import torch

    import os

    os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
    torch.set_num_threads(a.threads)
    from satseq.config.schema import VllmConfig
    from satseq.models.agents import AgentPool
    from satseq.models.loading import load_causal_lm
    from satseq.rollout.hf_engine import HFEngine
    from satseq.rollout.padding import left_pad
    from satseq.rollout.types import SamplingParams
    from satseq.rollout.vllm_engine import VLLMEngine

    model32, tok = load_causal_lm("smollm2")
    model32.eval()
    models = {k: model32 if k == "fp32" else _cast(model32, torch.bfloat16) for k in a.precisions}
    agents = [f"agent_{i + 1}" for i in range(a.lora)]
    pools = {}
    for k in [k for k in models if k in a.lora_precisions] if agents else ():  # K LoRA r16 agents on a copy of each base
        pools[k] = AgentPool.lora(agents, _cast(models[k], models[k].dtype), tok, r=16, alpha=32, dropout=0.0)
        gen = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for n, p in pools[k].root_modules()[0].named_parameters():
                if "lora_B" in n:
                    p.copy_(torch.randn(p.shape, generator=gen).to(p.dtype) * 0.02)
    distinct, prompts = grpo_chat_batch(tok, a.batch, a.group)
    ids, attn = left_pad(prompts, tok.pad_token_id)
    P = ids.shape[1]
    peaks = {"fp32": gemm_peak(torch.float32), "bf16": gemm_peak(torch.bfloat16)}
    bw = bandwidth()
    roof = {k: roofline_seconds(model32.config, a.batch, P, a.tokens, peaks[k], bw, 2 if k == "bf16" else 4,
                                prefill_rows=len(distinct)) for k in peaks}
    print(f"{cpu_name()}; B{a.batch} = {len(distinct)} prompts × {a.group} samples × {a.tokens} tokens; threads "
          f"{a.threads}; prompts padded to {P} tokens; roofline fp32 {roof['fp32']['tok_s']:.0f} tok/s, bf16 "
          f"{roof['bf16']['tok_s']:.0f} tok/s; LoRA rows: {a.lora} agents, one turn each", flush=True)

    from satseq.rollout.fused_decode import available_gemms

    ours = {}  # decode GEMM kernel -> satseq's engine
    for g in a.gemms:
        ours[g] = HFEngine(tok, batch_size=a.batch, gemm=g)
        ours[g].eos_ids = set()  # exactly T tokens
    sp = SamplingParams(max_new_tokens=a.tokens)
    dtype_name = {"fp32": "float32", "bf16": "bfloat16"}
    vllm = {}  # (precision, variant) -> engine; variant: eager / compiled, and for LoRA adapter / merged
    for k in models:
        for mode in a.vllm:
            vllm[(k, mode)] = VLLMEngine(tok, settings=VllmConfig(enforce_eager=mode == "eager", kv_cache_gb=a.kv_cache_gb),
                                         dtype=dtype_name[k])
        for lora_mode in a.lora_modes if agents and k in a.lora_precisions else ():
            vllm[(k, f"lora-{lora_mode}")] = VLLMEngine(
                tok, settings=VllmConfig(enforce_eager=True, kv_cache_gb=a.kv_cache_gb, lora_mode=lora_mode),
                dtype=dtype_name[k])
    for e in vllm.values():
        e.ignore_eos = True

    def check(out):
        assert all(len(g.response_ids) == a.tokens for g in out)

    def base_path(gen):
        return lambda k: check(gen(models[k], k))

    def lora_path(gen):  # a relay: each agent takes one turn on the batch (the acting agent changes every call)
        def run(k):
            if k not in pools:
                return
            for name in agents:
                check(gen(pools[k].module(name), k))
        return run

    def satseq_gen(gemm):
        def gen(m, k):
            return ours[gemm].generate(m, prompts, sp, torch.Generator().manual_seed(0))
        return gen

    def only(prec_gemms, fn):  # a kernel this build lacks in a precision: that row is skipped there
        return lambda k: fn(k) if prec_gemms(k) else None

    def vllm_gen(variant):
        def gen(m, k):
            e = vllm[(k, variant)]
            if e._engine is not None:
                e._engine.llm.reset_prefix_cache()
            return e.generate(m, prompts, sp, torch.Generator().manual_seed(0))
        return gen

    def generate_gen(m, k):
        with torch.no_grad():
            out = m.generate(input_ids=ids, attention_mask=attn, do_sample=True, max_new_tokens=a.tokens,
                             min_new_tokens=a.tokens, pad_token_id=tok.pad_token_id, top_k=0, top_p=1.0)
        return [_Row(r) for r in out[:, P:].tolist()]

    has = {(k, g): g in available_gemms(getattr(torch, dtype_name[k]), "cpu") for k in models for g in ("mkl", "onednn", "torch")}
    paths = {f"satseq {g}": only(lambda k, g=g: has[(k, g)], base_path(satseq_gen(g))) for g in a.gemms}
    paths.update({f"vllm {mode}": base_path(vllm_gen(mode)) for mode in a.vllm})
    paths["generate"] = base_path(generate_gen)
    if agents:
        paths.update({f"LoRA satseq {g}": only(lambda k, g=g: has[(k, g)], lora_path(satseq_gen(g)))
                      for g in a.lora_gemms or a.gemms})
        paths.update({f"LoRA vllm {m}": lora_path(vllm_gen(f"lora-{m}")) for m in a.lora_modes})
        paths["LoRA generate"] = lora_path(generate_gen)
    starts = {}
    for k in models:  # warm-up: the vLLM engines start here (timed), every path runs once
        for name, fn in paths.items():
            t0 = time.perf_counter()
            fn(k)
            if "vllm" in name and not (name.startswith("LoRA") and k not in pools):
                starts[f"{name} {k}"] = time.perf_counter() - t0
            print(f"warm-up {k} {name}: {time.perf_counter() - t0:.1f} s", flush=True)
    runs = {(k, n): [] for k in models for n in paths}
    for r in range(a.repeats):
        for k in models:
            for name, fn in paths.items():
                t0 = time.perf_counter()
                fn(k)
                runs[(k, name)].append(time.perf_counter() - t0)
        print(f"round {r + 1}/{a.repeats}: " + ", ".join(f"{k} {n} {runs[(k, n)][-1]:.1f} s" for k in models
                                                          for n in paths), flush=True)
    # the sync: perturbed full weights into a running engine (what K full agents sharing one engine pay
    # when the acting agent changes, and what a merged LoRA agent pays per turn)
    k0 = a.precisions[0]
    e = vllm[(k0, a.vllm[0])]
    reload_s = []
    for _ in range(3):
        with torch.no_grad():
            next(models[k0].parameters()).mul_(1.0)  # bumps a version counter: the engine must reload
        t0 = time.perf_counter()
        e.sync(models[k0])
        reload_s.append(time.perf_counter() - t0)
    result = {"cpu": cpu_name(), "threads": a.threads, "batch": a.batch, "group": a.group, "tokens": a.tokens,
              "prompt_tokens": P, "lora_agents": a.lora, "peak_flops": peaks, "bandwidth": bw, "roofline": roof,
              "vllm_first_call_s": starts, "vllm_reload_s": statistics.median(reload_s), "runs": {}}
    print("\n| precision | path | tok/s | × generate | × satseq | share of roofline |\n|---|---|---|---|---|---|")
    for k in models:
        live = [n for n in paths if not (n.split()[-1] in a.gemms and "satseq" in n and not has[(k, n.split()[-1])])
                and not (n.startswith("LoRA") and k not in pools)]
        med = {n: statistics.median(runs[(k, n)]) for n in live}
        tps = {n: a.batch * a.tokens * (len(agents) if n.startswith("LoRA") else 1) / med[n] for n in live}
        result["runs"][k] = {n: {"seconds": runs[(k, n)], "tok_s": tps[n], "share_of_roofline": tps[n] / roof[k]["tok_s"]}
                             for n in live}
        for n in live:
            lora = n.startswith("LoRA")
            g = "LoRA generate" if lora else "generate"
            o = next(m for m in live if m.startswith("LoRA satseq" if lora else "satseq"))
            print(f"| {k} | {n} | {tps[n]:.0f} | {tps[n] / tps[g]:.2f} | {tps[n] / tps[o]:.2f} | "
                  f"{100 * tps[n] / roof[k]['tok_s']:.0f} % |")
    print("\nvLLM first call (engine start + warm-up): " + ", ".join(f"{n} {v:.1f} s" for n, v in starts.items())
          + f"; full-weight reload into a running engine {result['vllm_reload_s']:.2f} s (median of 3)")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "rollout_engines.json").write_text(json.dumps(result, indent=1))


class _Row:
    """``generate``'s sampled ids in the shape ``check`` reads."""

    def __init__(self, ids):
        self.response_ids = ids


def decode_gemm_shapes(cfg) -> dict[str, tuple[int, int, int]]:
    """The GEMMs of one decode step of satseq's fused Llama forward: name → (in, out, calls per step)."""
    d, L, V = cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size
    hd = d // cfg.num_attention_heads
    qkv = (cfg.num_attention_heads + 2 * cfg.num_key_value_heads) * hd
    return {"qkv": (d, qkv, L), "o": (cfg.num_attention_heads * hd, d, L), "gate_up": (d, 2 * cfg.intermediate_size, L),
            "down": (cfg.intermediate_size, d, L), "lm_head": (d, V, 1)}


def gemm_kernels(dtype, rows: int) -> dict:
    """Library kernels for ``y = x Wᵀ`` at ``rows`` rows: name → factory(w) returning a call(x). Only those
    this torch build has for ``dtype``."""
    import torch
    import torch.nn.functional as F

    out = {"F.linear": lambda w: (lambda x: F.linear(x, w)),
           "mm, Wᵀ contiguous": lambda w: (lambda x, wt=w.t().contiguous(): torch.mm(x, wt))}
    if dtype == torch.float32 and torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_reorder_linear_weight"):
        out["MKL packed (satseq's decode)"] = lambda w: (
            lambda x, p=torch.ops.mkl._mkl_reorder_linear_weight(w, rows): torch.ops.mkl._mkl_linear(x, p, w, None, rows))
    if torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"):
        def onednn(w):
            packed = torch.ops.mkldnn._reorder_linear_weight(w, rows)
            return lambda x: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
        out["oneDNN packed"] = onednn
    return out


def kernels(a) -> None:
    """Each decode GEMM of SmolLM2-135M at B rows through every library kernel, fp32 and bf16, against the
    roofline of that GEMM (max(FLOPs / GEMM peak, weight bytes / copy bandwidth))."""
    import torch

    torch.set_num_threads(a.threads)
    from transformers import AutoConfig

    from satseq.models.loading import load_causal_lm

    cfg = load_causal_lm("smollm2")[0].config if a.config is None else AutoConfig.from_pretrained(a.config)
    shapes = decode_gemm_shapes(cfg)
    peaks = {"fp32": gemm_peak(torch.float32), "bf16": gemm_peak(torch.bfloat16)}
    bw = bandwidth()
    print(f"{cpu_name()}; threads {a.threads}; {a.rows} rows; GEMM peak fp32 {peaks['fp32'] / 1e9:.0f} GFLOP/s, bf16 "
          f"{peaks['bf16'] / 1e9:.0f} GFLOP/s; copy bandwidth {bw / 1e9:.1f} GB/s\n")
    result = {"cpu": cpu_name(), "threads": a.threads, "rows": a.rows, "peak_flops": peaks, "bandwidth": bw, "gemms": {}}
    names = ["F.linear", "mm, Wᵀ contiguous", "MKL packed (satseq's decode)", "oneDNN packed"]
    print("| precision | GEMM (in → out) × calls per step | roofline | " + " | ".join(names) + " |\n|---|---|---|---|---|---|---|")
    for prec, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        ks = gemm_kernels(dtype, a.rows)
        timed = {}
        for name, (k_in, n_out, calls) in shapes.items():
            gen = torch.Generator().manual_seed(0)
            w = (torch.randn(n_out, k_in, generator=gen) * 0.02).to(dtype)
            x = torch.randn(a.rows, k_in, generator=gen).to(dtype)
            times = {}
            for kname, make in ks.items():
                try:
                    fn = make(w)
                    t0 = time.perf_counter()
                    y = fn(x)
                    first = time.perf_counter() - t0
                    assert torch.allclose(y.float(), x.float() @ w.float().t(), rtol=0.05, atol=0.05), kname
                except (RuntimeError, NotImplementedError) as e:  # a kernel this build lacks for the dtype
                    times[kname] = None
                    print(f"  ({prec} {name}: {kname} unavailable: {type(e).__name__}: {str(e).splitlines()[0][:90]})")
                    continue
                best = first  # a call over 0.5 s is timed once
                for _ in range(a.repeats if first < 0.5 else 0):
                    t0 = time.perf_counter()
                    for _ in range(a.calls):
                        fn(x)
                    best = min(best, (time.perf_counter() - t0) / a.calls)
                times[kname] = best
            timed[name] = (k_in, n_out, calls, times, w.element_size())
        # the roofline's peak: the large GEMM's, or the fastest rate a decode GEMM reached if that is higher
        peak = max([peaks[prec]] + [2 * a.rows * k * n / t for k, n, _, ts, _ in timed.values() for t in ts.values() if t])
        result[f"{prec}_peak_flops"] = peak
        step, roof_step, best_step = {}, 0.0, 0.0
        for name, (k_in, n_out, calls, times, size) in timed.items():
            roof = max(2 * a.rows * k_in * n_out / peak, k_in * n_out * size / bw)
            roof_step += roof * calls
            best_step += min(t for t in times.values() if t) * calls
            for kname, t in times.items():
                if t:
                    step[kname] = step.get(kname, 0.0) + t * calls
            result["gemms"][f"{prec} {name}"] = {"in": k_in, "out": n_out, "calls": calls, "roofline_s": roof, "kernels_s": times}
            cells = " | ".join("–" if not times.get(k) else f"{1e6 * times[k]:.0f} µs ({100 * roof / times[k]:.0f} %)" for k in names)
            print(f"| {prec} | {name} ({k_in} → {n_out}) × {calls} | {1e6 * roof:.0f} µs | {cells} |")
        result[f"{prec}_step"] = {"roofline_s": roof_step, "kernels_s": step, "best_per_gemm_s": best_step}
        print(f"| {prec} | **a decode step's GEMMs** | {1e3 * roof_step:.1f} ms | " + " | ".join(
            f"{1e3 * step[k]:.1f} ms ({100 * roof_step / step[k]:.0f} %)" if k in step else "–" for k in names)
              + f" |\n| {prec} | best kernel per GEMM | | {1e3 * best_step:.1f} ms ({100 * roof_step / best_step:.0f} % of the "
              f"roofline; peak {peak / 1e9:.0f} GFLOP/s) | | | |")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "decode_gemms.json").write_text(json.dumps(result, indent=1))


def stages(a) -> None:
    """Training stages on each engine: ``satseq train RECIPE rollout.engine=E`` in fresh processes, the
    engines taking turns round by round; the median stage and rollout times after each run's first stage."""
    import shutil
    import subprocess
    import sys

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(__import__("os").environ, OMP_NUM_THREADS=str(a.threads))  # rollout.decode_gemm=auto: measured per run
    rows: dict[str, list[dict]] = {e: [] for e in a.engines}
    for r in range(a.rounds):
        for e in a.engines:
            run = f"{e}_round{r}"
            if a.report:  # the table of the runs already in --out, nothing run
                if (out / run / "metrics.jsonl").is_file():
                    metrics = [json.loads(x) for x in (out / run / "metrics.jsonl").read_text().splitlines() if x.strip()]
                    rows[e].extend([m for m in metrics if "time/stage" in m][1:])
                continue
            cmd = [sys.executable, "-m", "satseq.cli", "train", a.recipe, f"rollout.engine={e}",
                   f"rollout.dtype={a.dtype}", f"trainer.num_stages={a.stages}", "trainer.eval_every=0",
                   "trainer.save_every=0", "trainer.progress=false", f"threads={a.threads}", f"output_dir={out}",
                   f"run_name={run}", "resume=false", *a.overrides]
            shutil.rmtree(out / run, ignore_errors=True)
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
            metrics = [json.loads(line) for line in (out / run / "metrics.jsonl").read_text().splitlines() if line.strip()]
            staged = [m for m in metrics if "time/stage" in m][1:]  # the first stage pays the engine's start
            rows[e].extend(staged)
            choice = json.loads((out / run / "run_info.json").read_text()).get("rollout") or {}
            print(f"round {r + 1}/{a.rounds} {e} ({choice.get('dtype')}, decode GEMMs {choice.get('gemm', 'auto')}): "
                  f"{time.perf_counter() - t0:.0f} s in all; stages after the first "
                  + ", ".join(f"{m['time/stage']:.1f}" for m in staged) + " s", flush=True)
    result = {"cpu": cpu_name(), "recipe": a.recipe, "threads": a.threads, "dtype": a.dtype, "overrides": a.overrides,
              "engines": {}}
    print(f"\n{cpu_name()}; {a.recipe}, {a.rounds} rounds × {a.stages} stages, {a.threads} threads\n"
          "| engine | stage (median, p25–p75) | rollout | rest of the stage | generated tokens per stage | × hf stage |\n"
          "|---|---|---|---|---|---|")
    med = {}
    for e, ms in rows.items():
        if not ms:
            continue
        st = [m["time/stage"] for m in ms]
        ro = [m.get("time/rollout", float("nan")) for m in ms]
        tok = [m.get("rollout/generated_tokens", float("nan")) for m in ms]
        q = statistics.quantiles(st, n=4) if len(st) > 1 else [st[0]] * 3
        med[e] = statistics.median(st)
        result["engines"][e] = {"stage_s": st, "rollout_s": ro, "generated_tokens": tok}
        base = med.get("hf", med[e])
        print(f"| {e} | {med[e]:.1f} s ({q[0]:.1f}–{q[2]:.1f}) | {statistics.median(ro):.1f} s | "
              f"{med[e] - statistics.median(ro):.1f} s | {statistics.median(tok):.0f} | {med[e] / base:.2f} |")
    (out / "engine_stages.json").write_text(json.dumps(result, indent=1))


def few_shot_prompts(cfg, problems: list[str]) -> dict[str, list[str]]:
    """The recipe's turn prompts for ``problems``: the solve prompt and its exact-text later turns,
    filled with a fixed wrong attempt (what a held-out evaluation's turns 2 and 3 look like)."""
    from satseq.workflows.prompts import render_problem

    fill = {"attempt": "2 + 3 + 4 = 8. The answer is 8.", "feedback": "First add 2 + 3 = 5. Then add 4 to 5.",
            "verification": "2 + 3 = 5. 5 + 4 = 9. 9 is not 8. The answer is wrong."}
    out = {"solve": [render_problem(cfg.data.prompt_template, p) for p in problems]}
    for section, key in [("mlmt", "coach_prompt"), ("mlmt", "refine_prompt"), ("pag", "verify_prompt"),
                         ("pag", "revise_prompt")]:
        template = getattr(getattr(cfg, section), key, None)
        if template:
            filled = []
            for p in problems:
                text = template.replace("{problem}", p)
                for name, value in fill.items():
                    text = text.replace("{" + name + "}", value)
                filled.append(text)
            out[f"{section}.{key}"] = filled
    return out


def few_shot(a) -> None:
    import torch

    from satseq.config import load_config
    from satseq.data.loading import load_problems
    from satseq.models.loading import load_causal_lm
    from satseq.rollout import fused_decode
    from satseq.rollout.hf_engine import HFEngine
    from satseq.rollout.padding import left_pad
    from satseq.rollout.types import SamplingParams

    torch.set_num_threads(a.threads)
    cfg = load_config(a.recipe, [])
    problems = [p.problem for p in load_problems(cfg.data.eval)[: a.problems]]
    turns = few_shot_prompts(cfg, problems)
    model, tok = load_causal_lm("smollm2")
    model.eval()
    sp = SamplingParams(max_new_tokens=cfg.rollout.max_new_tokens, temperature=1.0, stop=tuple(cfg.rollout.stop))
    engine = HFEngine(tok, fused=True, gemm=cfg.rollout.decode_gemm)
    batches = {t: [tok(x, add_special_tokens=False)["input_ids"] for x in ps for _ in range(a.n)]
               for t, ps in turns.items()}
    default = fused_decode.MIN_SHARED_PREFIX

    def call(shared: bool, ids):
        fused_decode.MIN_SHARED_PREFIX = default if shared else 10 ** 9
        try:
            t0 = time.perf_counter()
            out = engine.generate(model, ids, sp, torch.Generator().manual_seed(0))
            return time.perf_counter() - t0, [g.response_ids for g in out]
        finally:
            fused_decode.MIN_SHARED_PREFIX = default

    rows = {}
    for turn, ids in batches.items():
        call(True, ids), call(False, ids)  # warm-up: the fused weights, the allocator
        times = {True: [], False: []}
        same = True
        for _ in range(a.repeats):
            (ts, a_out), (tw, b_out) = call(True, ids), call(False, ids)
            times[True].append(ts)
            times[False].append(tw)
            same &= a_out == b_out
        distinct = [list(x) for x in {tuple(x) for x in ids}]
        lengths = [len(x) for x in distinct]
        shared_len = fused_decode.common_prefix(*left_pad(distinct, 0))
        rows[turn] = {"rows": len(ids), "distinct_prompts": len(distinct), "header_tokens": shared_len,
                      "prefill_tokens_whole": sum(lengths),
                      "prefill_tokens_shared": shared_len + sum(n - shared_len for n in lengths),
                      "seconds_shared": statistics.median(times[True]), "seconds_whole": statistics.median(times[False]),
                      "same_tokens": same}
        r = rows[turn]
        print(f"{turn:>20}: {r['rows']} rows, {r['distinct_prompts']} distinct prompts, header {shared_len} tokens; "
              f"prefilled {r['prefill_tokens_whole']:,} -> {r['prefill_tokens_shared']:,} tokens; "
              f"{r['seconds_whole']:.2f} s -> {r['seconds_shared']:.2f} s a call "
              f"({r['seconds_whole'] / r['seconds_shared']:.2f}x); same tokens: {same}")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "few_shot.json").write_text(json.dumps({"recipe": a.recipe, "threads": a.threads, "n": a.n,
                                                    "repeats": a.repeats, "turns": rows}, indent=1))
    print(f"wrote {out / 'few_shot.json'}")


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
    r.add_argument("--gemm", default="auto", choices=["auto", "mkl", "onednn", "torch"],
                   help="satseq's decode GEMM kernel (rollout.decode_gemm; auto = the build's default, MKL's packed GEMM)")
    r.add_argument("--profile", action="store_true",
                   help="also print where one fp32 satseq rollout spends its time (torch.profiler, by operator)")
    e = sub.add_parser("engines", help="SmolLM2-135M: satseq's engine, vLLM and generate (the venv with vLLM)")
    e.add_argument("--batch", type=int, default=32)
    e.add_argument("--group", type=int, default=4, help="samples per prompt: batch/group distinct prompts")
    e.add_argument("--tokens", type=int, default=64)
    e.add_argument("--threads", type=int, default=2)
    e.add_argument("--repeats", type=int, default=3)
    e.add_argument("--out", default="outputs/bench_rollout_engines")
    e.add_argument("--vllm", nargs="+", default=["eager", "compiled"], choices=["eager", "compiled"],
                   help="vLLM on the base model: eager (rollout.vllm.enforce_eager=true) and/or compiled")
    e.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    e.add_argument("--lora", type=int, default=3, help="LoRA rows: this many r16 agents, one relay turn each (0: none)")
    e.add_argument("--lora-modes", nargs="+", default=["adapter", "merged"], choices=["adapter", "merged"],
                   help="vLLM's LoRA rows (rollout.vllm.lora_mode): per-request adapters and/or merged weights per turn")
    e.add_argument("--gemms", nargs="+", default=["mkl", "onednn", "torch"], choices=["mkl", "onednn", "torch"],
                   help="satseq's decode GEMM kernels (rollout.decode_gemm), one row each where the build has it; "
                        "'× satseq' is against the first that runs in that precision")
    e.add_argument("--lora-precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"],
                   help="the precisions with LoRA rows")
    e.add_argument("--lora-gemms", nargs="+", default=None, choices=["mkl", "onednn", "torch"],
                   help="satseq's decode GEMM kernels in the LoRA rows (default: --gemms)")
    e.add_argument("--kv-cache-gb", type=int, default=1, help="each vLLM engine's KV cache (rollout.vllm.kv_cache_gb)")
    k = sub.add_parser("kernels", help="SmolLM2-135M's decode GEMMs through each library kernel, against their roofline")
    k.add_argument("--rows", type=int, default=32)
    k.add_argument("--threads", type=int, default=2)
    k.add_argument("--repeats", type=int, default=5)
    k.add_argument("--calls", type=int, default=20, help="calls per timing (the best timing of --repeats is kept)")
    k.add_argument("--config", default=None, help="an HF model directory whose shapes to use (default: SmolLM2-135M)")
    k.add_argument("--out", default="outputs/bench_decode_gemms")
    g = sub.add_parser("stages", help="training stages of a recipe on each engine (fresh processes, interleaved)")
    g.add_argument("--recipe", default="recipes/smollm2/sat_seq.yaml")
    g.add_argument("--engines", nargs="+", default=["hf", "vllm"], choices=["hf", "vllm"])
    g.add_argument("--stages", type=int, default=4, help="stages per run (the first is dropped)")
    g.add_argument("--rounds", type=int, default=2)
    g.add_argument("--threads", type=int, default=2)
    g.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="rollout.dtype of every run")
    g.add_argument("--out", default="outputs/bench_engine_stages")
    g.add_argument("--report", action="store_true", help="only the table of the runs already in --out (an interrupted bench)")
    g.add_argument("overrides", nargs="*", help="key=value overrides for every run")
    f = sub.add_parser("few-shot", help="SmolLM2-135M: a few-shot header prefilled once against every prompt whole")
    f.add_argument("--recipe", default="recipes/smollm2/mlmt_sum3.yaml")
    f.add_argument("--problems", type=int, default=32)
    f.add_argument("--n", type=int, default=3, help="samples per problem")
    f.add_argument("--threads", type=int, default=1)
    f.add_argument("--repeats", type=int, default=3)
    f.add_argument("--out", default="outputs/bench_few_shot")
    a = ap.parse_args(argv)
    {"tiny": tiny, "roofline": roofline, "engines": engines, "kernels": kernels, "stages": stages,
     "few-shot": few_shot}[a.bench](a)


if __name__ == "__main__":
    main()
