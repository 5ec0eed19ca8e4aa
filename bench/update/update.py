"""The cost of one update: its peak memory, bf16 autocast, shared prompt prefixes, the kept log-softmax, contiguous LM-head chunks, and per-rank memory under FSDP2.

    python bench/update/update.py memory [--batch 32] [--prompt 36] [--response 64] [--threads 1]
    python bench/update/update.py autocast [--batch 16] [--prompt 36] [--response 64] [--threads 1] [--repeats 3]
    python bench/update/update.py shared-prefix [--mode lora|full] [--rounds 5] [--threads 1] [--out FILE]
    python bench/update/update.py shared-prefix --response-min 6 --response 64   # ragged responses: length buckets
    python bench/update/update.py keep-logits [--mode lora|full] [--rounds 5] [--threads 1] [--out FILE]
    python bench/update/update.py contiguous-chunks [--mode lora|full] [--rounds 5] [--threads 1] [--out FILE]
    python bench/update/update.py fsdp-memory [--out /tmp/fsdp_memory] [--rows 4] [--prompt 32] [--response 32]

Each subcommand was its own script (bench/update_memory.py, bench/autocast_update.py,
bench/shared_prefix_update.py, bench/fsdp_memory.py); they share the random batch, the SmolLM2 policy
(full or LoRA r16 on q, k, v, o) and the reading of the process's peak RSS. What each measures and
prints is unchanged.

``memory``: peak memory of one policy-gradient update on SmolLM2-135M-Instruct, each setting in a
fresh process; 32 sequences x 100 tokens (36 prompt + 64 response) by default. Settings: full
fine-tuning with AdamW and LoRA r16 (q, k, v, o), each through the unchunked path (the LM head over the
response positions at once, what the trainer did before the chunked log-probs), the chunked path, then
``trainer.gradient_checkpointing``, then ``trainer.release_memory`` (glibc's mmap threshold fixed:
freed activations go back to the OS). One update is ``satseq.update.clipped_pg.clipped_pg_update``
(GRPO's), on random tokens, one mini-batch; the optimizer state exists after it. "Peak RSS" is the
child's peak during the update (the high-water mark is reset once the model is loaded: reading and
dequantizing the GGUF file peaks on its own, reported as "load peak"); "model loaded" is its RSS
before the update. Prints a Markdown table. Timings are only meaningful on an otherwise idle machine.

``autocast``: one GRPO update on SmolLM2-135M with ``trainer.autocast`` off vs ``bfloat16``,
interleaved. LoRA r16 on q, k, v, o; one on-policy mini-batch through ``clipped_pg_update`` (GRPO's
update), on random tokens. Reports the median update time of each setting, their ratio, and how far
the bf16 log-probs are from the fp32 ones. Run it on an otherwise idle machine.

``shared-prefix``: the trainer's forward + backward with each distinct prompt run once, against the
one-pass forward (SmolLM2-135M LoRA r16, 8 prompts x 4, 70 + 22 tokens by default). The batch of
bench/update/vs_trl.py's SmolLM2 case: ``prompts`` distinct random prompts of ``--prompt`` tokens,
``--group`` rows each, responses of ``--response`` tokens; ``--tail N`` appends N random tokens to each
row's prompt (rows then share only the prefix, like a relay's later turns); ``--response-min M`` draws
each response's length uniformly from M..``--response`` (ragged, as sampled answers are). One round
times ``response_logprobs`` (the trainer's log-prob pass, satseq/rollout/logprobs.py) and its backward
in three layouts interleaved in one process: one padded layout (A), shared prefixes in one padded
continuation (B, satseq/rollout/prefix_sharing.py), and shared prefixes with rows of similar length
run together (C, satseq/rollout/length_buckets.py, what the trainer does); the ratios of medians
against A are printed with the per-round times. Also checks that all give the same log-probs. Timings
are only meaningful on an otherwise idle machine.

``keep-logits``: the trainer's forward + backward with the LM head's log-softmax kept for backward
(below ``satseq.rollout.logprobs.KEEP_LOGITS_BYTES``, the default for a batch this size) against each
chunk recomputed in backward (``KEEP_LOGITS_BYTES = 0``: what every batch did before), interleaved in
one process. The batch is SmolLM2 GRPO's (recipes/smollm2/grpo.yaml): 8 prompts x 4, a 70-token prompt,
responses of 6..32 tokens. Checks that both give the same log-probs and gradients bit for bit, and
prints the size of what is kept. Timings are only meaningful on an otherwise idle machine.

``contiguous-chunks``: the trainer's forward (no grad, as the old log-probs and ``trainer.step_kl``) and
forward + backward with each LM-head chunk of positions copied contiguous before the head
(``satseq.rollout.logprobs.CONTIGUOUS_CHUNKS``, the default) against the strided views of ``[B, R, d]``
it was given before, interleaved in one process, on keep-logits' batch (SmolLM2 GRPO's). Prints both
medians, their ratio and the largest log-prob and gradient differences (equal up to rounding, not bit
for bit: F.linear on a strided input is a batched GEMM). Timings are only meaningful on an otherwise
idle machine.

``fsdp-memory``: per-rank memory of a full fine-tuning update with AdamW: 1 rank, 2 ranks
``replicate``, 2 ranks ``fsdp2``. The model is SmolLM2-135M's shape (Llama: 30 layers, hidden 576, FFN
1536, 9 heads / 3 KV heads, vocab 49,152, tied embeddings; 134.5 M parameters), randomly initialised:
memory does not depend on the values. Each configuration is a fresh process tree (``python -m
torch.distributed.run`` for 2 ranks, Gloo, one thread per rank) running satseq's own trainer path:
:func:`satseq.scale.fsdp.shard_model` for fsdp2, then two updates of ``batch_logprobs(grad=True)`` → a
token-mean loss → :func:`satseq.update.loop.optimizer_step` (the gradient all-reduce for replicate,
FSDP2's reduce-scatter for fsdp2, clipping at 1.0, AdamW) on ``--rows`` rows split over the ranks. The
first update creates the AdamW moments; the second is measured. Per rank:

* **params + grads + AdamW** — the bytes of the tensors this rank holds after the measured update:
  its parameters (its shards under fsdp2), their gradients and both AdamW moments (the sizes of the
  storages behind them, each counted once: padding of uneven shards and shared buffers included);
* **peak RSS during the update** — the process's resident-set high-water mark (``VmHWM``, reset
  through ``/proc/self/clear_refs`` just before the update), which also holds activations, the
  all-gathered layers, the Python interpreter and torch (about 0.3 GB) — and, for fsdp2, nothing of the
  full model it was built from (``release_freed_memory``: freed blocks go back to the OS).

``fsdp2+rollout copy`` is fsdp2 plus what a satseq training run under fsdp2 also keeps on every rank:
the rollout engine's full-weight copy of the model (:class:`satseq.scale.fsdp.GatheredRollouts`), fp32.
The table is printed in Markdown and written to ``OUT/fsdp_memory.json``; the reported figure of each
configuration is the largest over its ranks.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SMOLLM2 = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
               num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048, rms_norm_eps=1e-5,
               rope_theta=100000.0, tie_word_embeddings=True)
CONFIGS = [(1, "replicate"), (2, "replicate"), (2, "fsdp2"), (2, "fsdp2+rollout copy")]




def _status_kb(field: str) -> float:
    """``VmRSS`` (now) or ``VmHWM`` (peak since start or since the last reset) of this process, kB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return float("nan")


def _reset_peak() -> bool:
    """Reset this process's peak RSS (Linux: ``5`` to ``/proc/self/clear_refs``); False if refused."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def random_turn_batch(vocab: int, batch: int, prompt: int, response: int, g):
    """``batch`` random prompts and responses, random advantages, zero old log-probs: (prompts, responses, TurnBatch)."""
    import torch

    from satseq.update.batch import TurnBatch

    prompts = [torch.randint(0, vocab, (prompt,), generator=g).tolist() for _ in range(batch)]
    responses = [torch.randint(0, vocab, (response,), generator=g).tolist() for _ in range(batch)]
    return prompts, responses, TurnBatch(prompts, responses, torch.arange(batch), torch.randn(batch, generator=g),
                                         [[0.0] * response for _ in range(batch)])


def policy_pool(mode: str, model, tok):
    """One agent ``policy``: the model fully trainable (``full``) or LoRA r16 on q, k, v, o (``lora``)."""
    from satseq.models.agents import AgentPool

    return AgentPool.full(["policy"], [model], tok) if mode == "full" else \
        AgentPool.lora(["policy"], model, tok, r=16, alpha=32, dropout=0.0)


def memory_child(mode: str, ckpt: bool, chunked: bool, release: bool, batch: int, prompt: int, response: int,
          threads: int) -> dict:
    if release:  # trainer.release_memory, applied where satseq applies it: before the model exists
        from satseq.utils.memory import release_freed_memory

        release_freed_memory()
    import torch

    from satseq.models.loading import load_causal_lm
    from satseq.rollout import logprobs as lpmod
    from satseq.update.clipped_pg import PGSettings, clipped_pg_update
    from satseq.update.loop import make_optimizer

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    if not chunked:
        lpmod._decoder_and_head = lambda model: None
    model, tok = load_causal_lm("smollm2")
    pool = policy_pool(mode, model, tok)
    if ckpt:
        pool.enable_gradient_checkpointing()
    load_peak = _status_kb("VmHWM") / 1024  # reading and dequantizing the GGUF file has its own transient peak
    loaded = _status_kb("VmRSS") / 1024
    reset = _reset_peak()
    g = torch.Generator().manual_seed(0)
    _, _, b = random_turn_batch(model.config.vocab_size, batch, prompt, response, g)
    opt = torch.optim.AdamW(pool.parameters("policy"), lr=1e-6) if mode == "full" else None

    class Cfg:  # make_optimizer reads trainer.weight_decay only
        class trainer:
            weight_decay = 0.0
    opt = opt or make_optimizer(pool, "policy", 1e-6, Cfg)
    t0 = time.perf_counter()
    clipped_pg_update(pool, "policy", opt, b, PGSettings(mini_batch_size=batch), generator=g, device="cpu")
    return {"mode": mode, "checkpointing": ckpt, "chunked": chunked, "release": release, "loaded_mb": loaded, "load_peak_mb": load_peak,
            "peak_mb": _status_kb("VmHWM") / 1024 if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "peak_is_update_only": reset, "update_s": time.perf_counter() - t0}


def memory(a) -> None:
    """Peak memory of one update, each setting in a fresh process (was bench/update_memory.py)."""
    if a.child:
        mode, ckpt, chunked, release = a.child.split(",")
        print(json.dumps(memory_child(mode, ckpt == "1", chunked == "1", release == "1", a.batch, a.prompt,
                                      a.response, a.threads)))
        return
    rows = []
    for mode in ("full", "lora"):
        for chunked, ckpt, release in ((False, False, False), (True, False, False), (True, True, False),
                                       (True, True, True)):
            cmd = [sys.executable, __file__, "memory", "--child", f"{mode},{int(ckpt)},{int(chunked)},{int(release)}",
                   "--batch", str(a.batch), "--prompt", str(a.prompt), "--response", str(a.response),
                   "--threads", str(a.threads)]
            out = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS=str(a.threads)))
            if out.returncode != 0:
                sys.exit(f"bench/update/update.py memory: {mode} failed: {out.stderr.strip().splitlines()[-1]}")
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
            r = rows[-1]
            print(f"[memory] {mode} chunked={chunked} checkpointing={ckpt} release={release}: peak {r['peak_mb'] / 1024:.2f} GB "
                  f"(model loaded {r['loaded_mb'] / 1024:.2f} GB), update {r['update_s']:.1f} s", flush=True)
    print(f"\n{a.batch} x {a.prompt + a.response} tokens ({a.response} response), fp32, {a.threads} thread(s)\n")
    print("| fine-tuning | log-probs | gradient checkpointing | release_memory | peak RSS (update) | model loaded | load peak | update time |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {'full, AdamW' if r['mode'] == 'full' else 'LoRA r16, AdamW'} | "
              f"{'chunked' if r['chunked'] else 'whole [B, R, V]'} | {'on' if r['checkpointing'] else 'off'} | "
              f"{'on' if r['release'] else 'off'} | "
              f"{r['peak_mb'] / 1024:.2f} GB{'' if r['peak_is_update_only'] else ' (whole process)'} | "
              f"{r['loaded_mb'] / 1024:.2f} GB | {r['load_peak_mb'] / 1024:.2f} GB | {r['update_s']:.1f} s |")


def autocast(a) -> None:
    """One GRPO update with ``trainer.autocast`` off vs ``bfloat16`` (was bench/autocast_update.py)."""
    import torch

    torch.set_num_threads(a.threads)
    from satseq.models.loading import load_causal_lm
    from satseq.rollout.logprobs import response_logprobs
    from satseq.update.clipped_pg import PGSettings, clipped_pg_update
    from satseq.utils import precision

    model, tok = load_causal_lm("smollm2")
    pool = policy_pool("lora", model, tok)
    g = torch.Generator().manual_seed(0)
    prompts, responses, batch = random_turn_batch(model.config.vocab_size, a.batch, a.prompt, a.response, g)
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


def _shared_prompt_batch(a, tail: int, low: int):
    """SmolLM2's policy (``a.mode``: full or LoRA) at ``a.threads`` threads and a random batch of ``a.prompts``
    distinct prompts of ``a.prompt`` tokens, each repeated ``a.group`` times (plus ``tail`` tokens of its own),
    with responses of ``low..a.response`` tokens.
    Returns (policy module, tokenizer, vocabulary size, prompts, responses, lengths)."""
    import torch

    from satseq.models.loading import load_causal_lm

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model, tok = load_causal_lm("smollm2")
    m = policy_pool(a.mode, model, tok).module("policy")
    g = torch.Generator().manual_seed(0)
    V = model.config.vocab_size
    distinct = [torch.randint(0, V, (a.prompt,), generator=g).tolist() for _ in range(a.prompts)]
    if tail:
        prompts = [p + torch.randint(0, V, (tail,), generator=g).tolist() for p in distinct for _ in range(a.group)]
    else:
        prompts = [p for p in distinct for _ in range(a.group)]
    lengths = torch.randint(low, a.response + 1, (len(prompts),), generator=g).tolist()
    responses = [torch.randint(0, V, (n,), generator=g).tolist() for n in lengths]
    return m, tok, V, prompts, responses, lengths


def shared_prefix(a) -> None:
    """The trainer's forward + backward over shared prompts, three layouts (was bench/shared_prefix_update.py)."""
    from satseq.rollout import length_buckets
    from satseq.rollout import logprobs as lpmod
    from satseq.rollout import prefix_sharing
    from satseq.utils.io import write_json

    low = a.response if a.response_min is None else a.response_min
    m, tok, _, prompts, responses, lengths = _shared_prompt_batch(a, a.tail, low)
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


def keep_logits(a) -> None:
    """The trainer's forward + backward: the chunks' log-softmax kept vs recomputed in backward."""
    import torch

    from satseq.rollout import logprobs as lpmod
    from satseq.utils.io import write_json

    m, tok, V, prompts, responses, lengths = _shared_prompt_batch(a, 0, a.response_min)
    kept_bytes = len(prompts) * max(lengths) * V * 4
    default = lpmod.KEEP_LOGITS_BYTES
    settings = {"recomputed": 0, "kept": max(default, kept_bytes)}
    times: dict[str, list[float]] = {k: [] for k in settings}
    out: dict[str, tuple] = {}
    for r in range(a.rounds):
        for name, keep in settings.items():
            lpmod.KEEP_LOGITS_BYTES = keep
            t0 = time.perf_counter()
            lp, _ = lpmod.response_logprobs(m, prompts, responses, tok.pad_token_id)
            lp.sum().backward()
            times[name].append(time.perf_counter() - t0)
            out[name] = (lp.detach(), [p.grad.clone() for p in m.parameters() if p.grad is not None])
            m.zero_grad(set_to_none=True)
            print(f"round {r} {name:>10}: forward + backward {times[name][-1]:6.2f} s", flush=True)
    lpmod.KEEP_LOGITS_BYTES = default
    same = torch.equal(out["kept"][0], out["recomputed"][0]) and len(out["kept"][1]) == len(out["recomputed"][1]) \
        and all(torch.equal(x, y) for x, y in zip(out["kept"][1], out["recomputed"][1]))
    med = {k: statistics.median(v) for k, v in times.items()}
    res = {"mode": a.mode, "rows": len(prompts), "prompt_tokens": a.prompt, "response_tokens": [a.response_min, a.response],
           "threads": a.threads, "rounds": a.rounds, "kept_bytes": kept_bytes, "default_keep_bytes": default,
           "kept_by_default": kept_bytes <= default, "bit_identical": same, "median_s": med, "rounds_s": times,
           "ratio": med["recomputed"] / med["kept"]}
    print(f"\n{a.mode}, {len(prompts)} rows = {a.prompts} prompts x {a.group}, {a.prompt} + {a.response_min}.."
          f"{a.response} tokens, {a.threads} thread(s), medians of {a.rounds}:")
    print(f"| log-softmax in backward | forward + backward |\n|---|---|\n| recomputed per chunk | {med['recomputed']:.2f} s |\n"
          f"| kept ({kept_bytes / 2**20:.0f} MiB; kept by default: {kept_bytes <= default}) | {med['kept']:.2f} s |")
    print(f"ratio {res['ratio']:.2f}x; log-probs and gradients bit-identical: {same}")
    if a.out:
        write_json(a.out, res)
    if not same:
        sys.exit("bench/update/update.py keep-logits: kept and recomputed log-softmax disagree")


def contiguous_chunks(a) -> None:
    """The trainer's forward and forward + backward: LM-head chunks copied contiguous vs strided views."""
    import torch

    from satseq.rollout import logprobs as lpmod
    from satseq.utils.io import write_json

    m, tok, _, prompts, responses, lengths = _shared_prompt_batch(a, 0, a.response_min)
    default = lpmod.CONTIGUOUS_CHUNKS
    settings = {"strided": False, "contiguous": True}
    times: dict[str, dict[str, list[float]]] = {k: {"forward": [], "forward_backward": []} for k in settings}
    out: dict[str, tuple] = {}
    for r in range(a.rounds):
        for name, contiguous in settings.items():
            lpmod.CONTIGUOUS_CHUNKS = contiguous
            t0 = time.perf_counter()
            with torch.no_grad():
                lpmod.response_logprobs(m, prompts, responses, tok.pad_token_id)
            t1 = time.perf_counter()
            lp, _ = lpmod.response_logprobs(m, prompts, responses, tok.pad_token_id)
            lp.sum().backward()
            t2 = time.perf_counter()
            times[name]["forward"].append(t1 - t0)
            times[name]["forward_backward"].append(t2 - t1)
            out[name] = (lp.detach(), [p.grad.clone() for p in m.parameters() if p.grad is not None])
            m.zero_grad(set_to_none=True)
            print(f"round {r} {name:>10}: forward {t1 - t0:6.2f} s  forward + backward {t2 - t1:6.2f} s", flush=True)
    lpmod.CONTIGUOUS_CHUNKS = default
    lp_gap = float((out["strided"][0] - out["contiguous"][0]).abs().max())
    grad_gap = max(float((x - y).abs().max() / y.abs().max().clamp(min=1e-30))
                   for x, y in zip(out["strided"][1], out["contiguous"][1]))
    med = {k: {part: statistics.median(v) for part, v in parts.items()} for k, parts in times.items()}
    ratio = {part: med["strided"][part] / med["contiguous"][part] for part in ("forward", "forward_backward")}
    res = {"mode": a.mode, "rows": len(prompts), "prompt_tokens": a.prompt, "response_tokens": [a.response_min, a.response],
           "response_max": max(lengths), "threads": a.threads, "rounds": a.rounds, "median_s": med, "rounds_s": times,
           "ratio": ratio, "max_logprob_gap": lp_gap, "max_relative_grad_gap": grad_gap}
    print(f"\n{a.mode}, {len(prompts)} rows = {a.prompts} prompts x {a.group}, {a.prompt} + {a.response_min}.."
          f"{a.response} tokens, {a.threads} thread(s), medians of {a.rounds}:")
    print("| LM-head chunks | forward (no grad) | forward + backward |\n|---|---|---|")
    for k in settings:
        print(f"| {k} | {med[k]['forward']:.2f} s | {med[k]['forward_backward']:.2f} s |")
    print(f"ratio {ratio['forward']:.2f}x / {ratio['forward_backward']:.2f}x; largest |log-prob difference| {lp_gap:.1e}, "
          f"largest gradient difference {grad_gap:.1e} of the gradient's largest entry")
    if a.out:
        write_json(a.out, res)


def _bytes(tensors) -> int:
    from torch.distributed.tensor import DTensor

    storages = {}  # by storage: a shard's local tensor can be a view of a larger buffer (counted once)
    for t in tensors:
        if t is None:
            continue
        t = t.to_local() if isinstance(t, DTensor) else t
        st = t.untyped_storage()
        storages[st.data_ptr()] = st.nbytes()
    return sum(storages.values())


def fsdp_worker(a) -> None:
    """One rank of one configuration (under torchrun for 2 ranks); writes its figures as JSON."""
    import torch
    import torch.distributed as dist
    from transformers import LlamaConfig, LlamaForCausalLM

    from satseq.scale import ddp, fsdp
    from satseq.update.batch import TurnBatch, batch_logprobs
    from satseq.update.loop import optimizer_step
    from satseq.utils.memory import release_freed_memory

    release_freed_memory()
    torch.set_num_threads(1)
    if ddp.launched_ranks() > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**SMOLLM2))
    n_params = sum(p.numel() for p in model.parameters())
    rollout_copy = None
    if a.strategy.startswith("fsdp2") and ddp.is_distributed():
        if a.strategy != "fsdp2":  # what a satseq run also holds: the rollout engine's full copy (GatheredRollouts)
            import copy

            rollout_copy = copy.deepcopy(model).requires_grad_(False)
        fsdp.shard_model(model, fsdp.device_mesh("cpu"))
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=1e-5)
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, SMOLLM2["vocab_size"], (a.prompt,), generator=g).tolist() for _ in range(a.rows)]
    responses = [torch.randint(0, SMOLLM2["vocab_size"], (a.response,), generator=g).tolist() for _ in range(a.rows)]
    batch = TurnBatch(prompts, responses, torch.arange(a.rows), torch.zeros(a.rows), [[0.0] * a.response] * a.rows)

    # batch_logprobs and optimizer_step ask the run's strategy (satseq/strategy.py) for the row split, the
    # gradient reduction and FSDP2's backward: the one trainer.strategy names, as in a training run
    from satseq.scale.fsdp2 import Fsdp2
    from satseq.scale.replicate import Replicate
    from satseq.strategy import activate

    strategy = Fsdp2() if a.strategy.startswith("fsdp2") else Replicate()

    def update() -> None:
        with torch.enable_grad(), activate(strategy):
            model.train()
            lp, mask = batch_logprobs(model, batch, 0, temperature=1.0, device="cpu", grad=True, chunk=a.rows)
            loss = -(lp * mask).sum() / mask.sum()
            optimizer_step(opt, loss, params, 1.0)

    update()  # creates the AdamW moments
    ddp.barrier()
    rss_before = _status_kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    import time

    t0 = time.perf_counter()
    update()
    seconds = time.perf_counter() - t0
    peak = _status_kb("VmHWM")
    states = [v for st in opt.state.values() for k, v in st.items() if k in ("exp_avg", "exp_avg_sq")]
    row = {"ranks": ddp.world_size(), "strategy": a.strategy, "rank": ddp.rank(), "params": n_params,
           "param_bytes": _bytes(params), "grad_bytes": _bytes(p.grad for p in params),
           "adam_bytes": _bytes(states), "rss_before_update_kb": rss_before, "peak_rss_update_kb": peak,
           "update_seconds": seconds}
    row["pga_bytes"] = row["param_bytes"] + row["grad_bytes"] + row["adam_bytes"]
    row["copy_bytes"] = _bytes(rollout_copy.parameters()) if rollout_copy is not None else 0
    out = Path(a.out) / f"{a.strategy.replace(' ', '_')}_{ddp.world_size()}_{ddp.rank()}.json"
    out.write_text(json.dumps(row))
    ddp.barrier()
    ddp.teardown()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fsdp_memory(a) -> None:
    """Per-rank memory of a full fine-tuning update: 1 rank, 2 ranks replicate, 2 ranks fsdp2 (was bench/fsdp_memory.py)."""
    Path(a.out).mkdir(parents=True, exist_ok=True)
    if a.worker:
        return fsdp_worker(a)
    rows = []
    for ranks, strategy in CONFIGS:
        launch = [sys.executable] if ranks == 1 else [
            sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(ranks), "--master_addr",
            "127.0.0.1", "--master_port", str(_free_port())]
        cmd = [*launch, __file__, "fsdp-memory", "--worker", "--strategy", strategy, "--out", a.out, "--rows", str(a.rows),
               "--prompt", str(a.prompt), "--response", str(a.response)]
        r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
        if r.returncode != 0:
            sys.exit(f"bench/update/update.py fsdp-memory: {ranks} rank(s) {strategy} failed: {r.stderr.strip()[-2000:]}")
        per_rank = [json.loads((Path(a.out) / f"{strategy.replace(' ', '_')}_{ranks}_{k}.json").read_text())
                    for k in range(ranks)]
        rows.append({"ranks": ranks, "strategy": strategy, "params": per_rank[0]["params"],
                     **{k: max(x[k] for x in per_rank) for k in ("param_bytes", "grad_bytes", "adam_bytes", "pga_bytes",
                                                                  "copy_bytes", "rss_before_update_kb", "peak_rss_update_kb",
                                                                  "update_seconds")}})
    base = rows[0]
    gb = 1e9
    print(f"SmolLM2-135M-shaped Llama ({base['params'] / 1e6:.1f} M parameters), full fine-tuning, AdamW, "
          f"{a.rows} rows × ({a.prompt} + {a.response}) tokens per update, fp32, Gloo, 1 thread per rank; "
          "per rank, the largest over ranks\n")
    print("| ranks | strategy | params | grads | AdamW moments | params + grads + AdamW | × 1 rank | rollout copy | "
          "peak RSS during the update | × 1 rank |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['ranks']} | {r['strategy']} | {r['param_bytes'] / gb:.3f} GB | {r['grad_bytes'] / gb:.3f} GB | "
              f"{r['adam_bytes'] / gb:.3f} GB | {r['pga_bytes'] / gb:.3f} GB | {r['pga_bytes'] / base['pga_bytes']:.2f} | "
              f"{r['copy_bytes'] / gb:.3f} GB | "
              f"{r['peak_rss_update_kb'] * 1024 / gb:.2f} GB | {r['peak_rss_update_kb'] / base['peak_rss_update_kb']:.2f} |")
    (Path(a.out) / "fsdp_memory.json").write_text(json.dumps(rows, indent=1))


def _grpo_batch_options(p: argparse.ArgumentParser) -> None:
    """SmolLM2 GRPO's update batch (recipes/smollm2/grpo.yaml: 8 prompts x 4, a 70-token prompt, 6..32 response
    tokens) and the timing options, for the subcommands that time the trainer's log-prob pass on it."""
    p.add_argument("--mode", choices=["lora", "full"], default="lora")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--prompt", type=int, default=70)
    p.add_argument("--response-min", type=int, default=6)
    p.add_argument("--response", type=int, default=32)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="bench", required=True)
    m = sub.add_parser("memory", help="peak RSS of one update on SmolLM2: full / LoRA, chunked, checkpointing, release")
    m.add_argument("--batch", type=int, default=32)
    m.add_argument("--prompt", type=int, default=36)
    m.add_argument("--response", type=int, default=64)
    m.add_argument("--threads", type=int, default=1)
    m.add_argument("--child", help=argparse.SUPPRESS)
    c = sub.add_parser("autocast", help="one LoRA update on SmolLM2, trainer.autocast off vs bfloat16, interleaved")
    c.add_argument("--batch", type=int, default=16)
    c.add_argument("--prompt", type=int, default=36)
    c.add_argument("--response", type=int, default=64)
    c.add_argument("--threads", type=int, default=1)
    c.add_argument("--repeats", type=int, default=3)
    s = sub.add_parser("shared-prefix", help="the trainer's forward + backward: one pass vs shared prefixes vs length buckets")
    s.add_argument("--mode", choices=["lora", "full"], default="lora")
    s.add_argument("--prompts", type=int, default=8)
    s.add_argument("--group", type=int, default=4)
    s.add_argument("--prompt", type=int, default=70)
    s.add_argument("--response", type=int, default=22)
    s.add_argument("--response-min", type=int, default=None,
                   help="draw each response's length from this..--response (default: all --response)")
    s.add_argument("--tail", type=int, default=0,
                   help="tokens after the shared prompt that differ per row (a relay's earlier answers)")
    s.add_argument("--rounds", type=int, default=5)
    s.add_argument("--threads", type=int, default=1)
    s.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    for name, what in (("keep-logits", "the trainer's forward + backward: LM-head log-softmax kept vs recomputed in backward"),
                       ("contiguous-chunks", "the trainer's forward (+ backward): LM-head chunks copied contiguous vs strided views")):
        _grpo_batch_options(sub.add_parser(name, help=what))
    f = sub.add_parser("fsdp-memory", help="per-rank memory of a full update: 1 rank, 2 ranks replicate, 2 ranks fsdp2")
    f.add_argument("--out", default="/tmp/fsdp_memory")
    f.add_argument("--rows", type=int, default=4, help="rows of the update batch (split over the ranks)")
    f.add_argument("--prompt", type=int, default=32)
    f.add_argument("--response", type=int, default=32)
    f.add_argument("--strategy", default="replicate")
    f.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    {"memory": memory, "autocast": autocast, "shared-prefix": shared_prefix, "keep-logits": keep_logits,
     "contiguous-chunks": contiguous_chunks, "fsdp-memory": fsdp_memory}[a.bench](a)


if __name__ == "__main__":
    main()
