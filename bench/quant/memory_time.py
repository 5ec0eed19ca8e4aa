"""Quantized bases (``model.quantization``) against fp32 on SmolLM2-135M with LoRA: update memory and stage time.

    python bench/quant/memory_time.py memory [--batch 32] [--prompt 36] [--response 64] [--repeats 2] [--checkpointing] [--threads 1]
    python bench/quant/memory_time.py time [--prompts 4] [--group 4] [--new 32] [--rounds 5] [--threads 1]

Both compare ``none`` (the fp32 base), ``int8`` (LLM.int8) and ``nf4`` (4-bit NormalFloat), each with
satseq's LoRA pool (r16 on q, k, v, o: ``AgentPool.lora``, which prepares a quantized base QLoRA-style)
on SmolLM2-135M-Instruct (the bundled GGUF, dequantized to fp32, then quantized by bitsandbytes:
``load_causal_lm(..., quantization=...)``).

``memory``: one GRPO update (``satseq.update.clipped_pg.clipped_pg_update``, on random tokens, one
mini-batch, AdamW over the adapters; the batch of bench/update/update.py memory) per fresh process, the
three settings interleaved (none, int8, nf4, none, int8, nf4, ... for ``--repeats`` rounds);
``--checkpointing``: with ``trainer.gradient_checkpointing`` (activations shrink to the layer inputs, so
the base's weights are a larger share of the peak). Memory is the process's **peak RSS** (``VmHWM``), reset through ``/proc/self/clear_refs`` after the model is loaded,
so the figure is the update's own high-water mark plus what was resident before it. Why RSS: on a CPU
torch has no allocator statistics (``torch.cuda.max_memory_allocated`` is CUDA's), and ``tracemalloc``
sees Python objects, not tensor storage; bitsandbytes' CPU kernels allocate through torch, so RSS sees
everything a quantized update holds (the int8 activations, the dequantized nf4 weight of the layer in
flight). Each child fixes glibc's mmap threshold first (``trainer.release_memory``'s
``release_freed_memory``): a freed block then leaves the RSS, so the figure is what the update keeps
live, not heap glibc holds on to (without it, whatever a load freed stays resident and counts). Also
printed: the bytes of the base's parameters and buffers (``get_memory_footprint``) and the RSS once
loaded. Each child parses the GGUF file itself (the converted-model cache off, ``SATSEQ_GGUF_CACHE=0``):
a base loaded from the cache's safetensors keeps that file mapped (its embeddings point into it), and
every page a load touched counts in the RSS as file-backed, evictable memory (a quantized load touches
all 513 MB of the fp32 file; an fp32 one only what a forward reads), which is not what the update needs.
Parsed from the GGUF, every setting's weights are anonymous memory, and only those it keeps.
Memory does not depend on the machine's load (its timings here do).

``time``: the three pools in one process; each round runs one stage per setting (``--prompts`` chat
prompts x ``--group`` samples rolled out by satseq's engine for ``--new`` tokens, then one GRPO update
on them with random advantages), the order rotated every round (ABC, BCA, CAB, ...) so drift in the
machine's speed falls on all three alike. Prints the median rollout, update and stage seconds and the
ratio of stages to fp32's. Timings are only meaningful on an otherwise idle machine.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = ("none", "int8", "nf4")
PROMPTS = ["What is 12 + 35?", "Natalia sold 48 clips in April and half as many in May. How many in all?",
           "Name three colours.", "A train travels 60 km in 1.5 hours. What is its speed?",
           "What is the capital of France?", "Write 7 x 8.", "Is 91 a prime number?", "Sum 1 + 2 + 3 + 4."]


def _status_kb(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return float("nan")


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _pool(q: str):
    """SmolLM2 with quantization ``q`` and one LoRA agent ``policy`` (r16, q/k/v/o); the base's bytes."""
    from satseq.models.agents import AgentPool
    from satseq.models.loading import load_causal_lm

    model, tok = load_causal_lm("smollm2", quantization=q)
    footprint = model.get_memory_footprint()
    return AgentPool.lora(["policy"], model, tok, r=16, alpha=32, dropout=0.0), footprint


def _optimizer(pool):
    from satseq.update.loop import make_optimizer

    class Cfg:  # make_optimizer reads trainer.weight_decay only
        class trainer:
            weight_decay = 0.0
    return make_optimizer(pool, "policy", 1e-5, Cfg)


def _random_batch(vocab: int, batch: int, prompt: int, response: int, g):
    import torch

    from satseq.update.batch import TurnBatch

    prompts = [torch.randint(0, vocab, (prompt,), generator=g).tolist() for _ in range(batch)]
    responses = [torch.randint(0, vocab, (response,), generator=g).tolist() for _ in range(batch)]
    return TurnBatch(prompts, responses, torch.arange(batch), torch.randn(batch, generator=g),
                     [[0.0] * response for _ in range(batch)])


def memory_child(q: str, batch: int, prompt: int, response: int, threads: int, checkpointing: bool) -> dict:
    from satseq.utils.memory import release_freed_memory

    release_freed_memory()  # freed blocks go back to the OS: the RSS is what is live (see the module doc)
    import torch

    from satseq.update.clipped_pg import PGSettings, clipped_pg_update

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    pool, footprint = _pool(q)
    if checkpointing:
        pool.enable_gradient_checkpointing()
    load_peak = _status_kb("VmHWM") / 1024
    loaded = _status_kb("VmRSS") / 1024
    reset = _reset_peak()
    g = torch.Generator().manual_seed(0)
    b = _random_batch(pool.module("policy").config.vocab_size, batch, prompt, response, g)
    opt = _optimizer(pool)
    t0 = time.perf_counter()
    clipped_pg_update(pool, "policy", opt, b, PGSettings(mini_batch_size=batch), generator=g, device="cpu")
    return {"quantization": q, "base_mb": footprint / 2**20, "loaded_mb": loaded, "load_peak_mb": load_peak,
            "peak_mb": _status_kb("VmHWM") / 1024, "peak_is_update_only": reset,
            "update_s": time.perf_counter() - t0}


def memory(a) -> None:
    if a.child:
        print(json.dumps(memory_child(a.child, a.batch, a.prompt, a.response, a.threads, a.checkpointing)))
        return
    rows: dict[str, list[dict]] = {q: [] for q in SETTINGS}
    for rep in range(a.repeats):
        for q in SETTINGS:
            cmd = [sys.executable, __file__, "memory", "--child", q, "--batch", str(a.batch), "--prompt", str(a.prompt),
                   "--response", str(a.response), "--threads", str(a.threads)] + (["--checkpointing"] if a.checkpointing else [])
            out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                                 env=dict(os.environ, OMP_NUM_THREADS=str(a.threads), SATSEQ_GGUF_CACHE="0"))
            if out.returncode != 0:
                tail = (out.stderr.strip().splitlines() or ["(no output)"])[-1]
                sys.exit(f"bench/quant/memory_time.py memory: {q} failed: {tail}")
            r = json.loads(out.stdout.strip().splitlines()[-1])
            rows[q].append(r)
            print(f"[memory] round {rep + 1} {q}: update peak RSS {r['peak_mb']:.0f} MB (loaded {r['loaded_mb']:.0f} MB, "
                  f"base {r['base_mb']:.0f} MB), update {r['update_s']:.1f} s", flush=True)
    ref = statistics.median(r["peak_mb"] for r in rows["none"])
    print(f"\nSmolLM2-135M, LoRA r16 (q, k, v, o), one GRPO update of {a.batch} x {a.prompt + a.response} tokens "
          f"({a.response} response), gradient checkpointing {'on' if a.checkpointing else 'off'}, "
          f"{a.threads} thread(s), median of {a.repeats} fresh processes per setting\n")
    print("| model.quantization | base weights | RSS, model loaded | peak RSS, update | vs fp32 |")
    print("|---|---|---|---|---|")
    for q in SETTINGS:
        med = {k: statistics.median(r[k] for r in rows[q]) for k in ("base_mb", "loaded_mb", "peak_mb")}
        print(f"| {q} | {med['base_mb']:.0f} MB | {med['loaded_mb']:.0f} MB | {med['peak_mb']:.0f} MB | "
              f"{med['peak_mb'] / ref:.2f} |")


def timing(a) -> None:
    import torch

    from satseq.rollout.engine import make_engine
    from satseq.rollout.types import SamplingParams
    from satseq.update.batch import TurnBatch
    from satseq.update.clipped_pg import PGSettings, clipped_pg_update

    torch.set_num_threads(a.threads)
    pools = {q: _pool(q)[0] for q in SETTINGS}
    opts = {q: _optimizer(p) for q, p in pools.items()}
    tok = pools["none"].tokenizer
    prompts = [tok.apply_chat_template([{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}], tokenize=True,
                                       add_generation_prompt=True) for i in range(a.prompts)]
    prompts = [list(p["input_ids"] if isinstance(p, dict) or hasattr(p, "keys") else p) for p in prompts]
    rows = [p for p in prompts for _ in range(a.group)]
    engine = make_engine("hf", tok, batch_size=len(rows))
    engine.eos_ids = set()  # every row decodes --new tokens: the same work in every setting
    sampling = SamplingParams(max_new_tokens=a.new, temperature=1.0)
    times: dict[str, list[tuple[float, float]]] = {q: [] for q in SETTINGS}
    for rnd in range(a.rounds + 1):  # round 0 warms up
        order = SETTINGS[rnd % 3:] + SETTINGS[:rnd % 3]
        for q in order:
            pool = pools[q]
            g = torch.Generator().manual_seed(rnd)
            t0 = time.perf_counter()
            gens = engine.generate(pool.module("policy"), rows, sampling, g)
            t1 = time.perf_counter()
            batch = TurnBatch([x.prompt_ids for x in gens], [x.response_ids for x in gens], torch.arange(len(gens)),
                              torch.randn(len(gens), generator=g), [x.logprobs for x in gens])
            clipped_pg_update(pool, "policy", opts[q], batch, PGSettings(mini_batch_size=len(gens)), generator=g,
                              device="cpu")
            t2 = time.perf_counter()
            if rnd:
                times[q].append((t1 - t0, t2 - t1))
                print(f"[time] round {rnd} {q}: rollout {t1 - t0:.2f} s, update {t2 - t1:.2f} s", flush=True)
    ref = statistics.median(r + u for r, u in times["none"])
    print(f"\nSmolLM2-135M, LoRA r16, {a.prompts} prompts x {a.group} samples x {a.new} new tokens, {a.threads} thread(s), "
          f"median of {a.rounds} interleaved rounds\n")
    print("| model.quantization | rollout | update | stage | stage vs fp32 |")
    print("|---|---|---|---|---|")
    for q in SETTINGS:
        ro = statistics.median(r for r, _ in times[q])
        up = statistics.median(u for _, u in times[q])
        st = statistics.median(r + u for r, u in times[q])
        print(f"| {q} | {ro:.2f} s | {up:.2f} s | {st:.2f} s | {st / ref:.2f} |")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("memory", help="peak RSS of one GRPO update per setting, fresh processes, interleaved")
    m.add_argument("--batch", type=int, default=32)
    m.add_argument("--prompt", type=int, default=36)
    m.add_argument("--response", type=int, default=64)
    m.add_argument("--repeats", type=int, default=2)
    m.add_argument("--threads", type=int, default=1)
    m.add_argument("--checkpointing", action="store_true", help="trainer.gradient_checkpointing on")
    m.add_argument("--child", choices=SETTINGS, help=argparse.SUPPRESS)
    t = sub.add_parser("time", help="rollout + update stage time per setting, interleaved in one process")
    t.add_argument("--prompts", type=int, default=4)
    t.add_argument("--group", type=int, default=4)
    t.add_argument("--new", type=int, default=32)
    t.add_argument("--rounds", type=int, default=5)
    t.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    memory(a) if a.cmd == "memory" else timing(a)


if __name__ == "__main__":
    main()
