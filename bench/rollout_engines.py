"""SmolLM2-135M rollout: satseq's engine, vLLM and transformers' ``generate``, fp32 and bf16, interleaved.

    .venv-vllm/bin/python bench/rollout_engines.py [--batch 32] [--tokens 64] [--threads 2] [--repeats 3] [--out DIR]

Runs in the venv that has vLLM (``make setup-vllm``). One process, one shape: B rows (B / group distinct
chat prompts × group samples, as a GRPO batch) × exactly T sampled tokens (EOS ignored) at T = 1, as
bench/roofline.py. The engines take turns (satseq, vLLM, generate; fp32 then bf16) for ``--repeats``
rounds after one warm-up round; each figure is the median. vLLM's prefix cache is reset before each
timed call, so no call reuses another's prompts. Prints tok/s, the ratios and the share of this
machine's roofline (bench/roofline.py's model), and the cost of keeping vLLM in sync:

* ``reload``: new full weights into the running engine (``reload_weights``), what one engine shared by
  K full agents pays when the acting agent changes;
* ``start``: starting a second engine, what one engine per agent pays once per agent (and its memory
  for as long as the run lasts).

Writes ``rollout_engines.json`` under ``--out``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from roofline import _cast, bandwidth, gemm_peak, grpo_chat_batch, roofline_seconds  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--group", type=int, default=4, help="samples per prompt: batch/group distinct prompts")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="outputs/bench_rollout_engines")
    ap.add_argument("--compile", action="store_true", help="vLLM compiles the model (rollout.vllm.enforce_eager=false)")
    ap.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    a = ap.parse_args(argv)
    import os

    os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
    torch.set_num_threads(a.threads)
    from satseq.models.loading import load_causal_lm
    from satseq.rollout.hf_engine import HFEngine
    from satseq.rollout.padding import left_pad
    from satseq.rollout.types import SamplingParams
    from satseq.rollout.vllm_engine import VLLMEngine, VLLMSettings

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
    settings = VLLMSettings(enforce_eager=not a.compile)
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


if __name__ == "__main__":
    main()
