"""Peak memory of one policy-gradient update on SmolLM2-135M-Instruct, each setting in a fresh process.

    python bench/update_memory.py                    # 32 sequences x 100 tokens (36 prompt + 64 response)
    python bench/update_memory.py --batch 32 --prompt 36 --response 64 --threads 1

Settings: full fine-tuning with AdamW and LoRA r16 (q, k, v, o), each through the unchunked path
(the LM head over the response positions at once, what the trainer did before the chunked
log-probs), the chunked path, then ``trainer.gradient_checkpointing``, then ``trainer.release_memory``
(glibc's mmap threshold fixed: freed activations go back to the OS). One update is ``satseq.update.clipped_pg.clipped_pg_update`` (GRPO's), on random
tokens, one mini-batch; the optimizer state exists after it. "Peak RSS" is the child's peak during
the update (the high-water mark is reset once the model is loaded: reading and dequantizing the GGUF
file peaks on its own, reported as "load peak"); "model loaded" is its RSS before the update.
Prints a Markdown table. Timings are only meaningful on an otherwise idle machine.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _status_mb(field: str) -> float:
    """``VmRSS`` (now) or ``VmHWM`` (peak since start or since the last reset) of this process, MB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _reset_peak() -> bool:
    """Reset this process's peak RSS (Linux: ``5`` to ``/proc/self/clear_refs``); False if refused."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def child(mode: str, ckpt: bool, chunked: bool, release: bool, batch: int, prompt: int, response: int,
          threads: int) -> dict:
    sys.path.insert(0, str(ROOT))
    if release:  # trainer.release_memory, applied where satseq applies it: before the model exists
        from satseq.utils.memory import release_freed_memory

        release_freed_memory()
    import torch

    from satseq.models.agents import AgentPool
    from satseq.models.loading import load_causal_lm
    from satseq.rollout import logprobs as lpmod
    from satseq.update.batch import TurnBatch
    from satseq.update.clipped_pg import PGSettings, clipped_pg_update
    from satseq.update.loop import make_optimizer

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    if not chunked:
        lpmod._decoder_and_head = lambda model: None
    model, tok = load_causal_lm("smollm2")
    pool = AgentPool.full(["policy"], [model], tok) if mode == "full" else \
        AgentPool.lora(["policy"], model, tok, r=16, alpha=32, dropout=0.0)
    if ckpt:
        pool.enable_gradient_checkpointing()
    load_peak = _status_mb("VmHWM")  # reading and dequantizing the GGUF file has its own transient peak
    loaded = _status_mb("VmRSS")
    reset = _reset_peak()
    g = torch.Generator().manual_seed(0)
    V = model.config.vocab_size
    b = TurnBatch([torch.randint(0, V, (prompt,), generator=g).tolist() for _ in range(batch)],
                  [torch.randint(0, V, (response,), generator=g).tolist() for _ in range(batch)],
                  torch.arange(batch), torch.randn(batch, generator=g), [[0.0] * response for _ in range(batch)])
    opt = torch.optim.AdamW(pool.parameters("policy"), lr=1e-6) if mode == "full" else None

    class Cfg:  # make_optimizer reads trainer.weight_decay only
        class trainer:
            weight_decay = 0.0
    opt = opt or make_optimizer(pool, "policy", 1e-6, Cfg)
    t0 = time.perf_counter()
    clipped_pg_update(pool, "policy", opt, b, PGSettings(mini_batch_size=batch), generator=g, device="cpu")
    return {"mode": mode, "checkpointing": ckpt, "chunked": chunked, "release": release, "loaded_mb": loaded, "load_peak_mb": load_peak,
            "peak_mb": _status_mb("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "peak_is_update_only": reset, "update_s": time.perf_counter() - t0}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=36)
    ap.add_argument("--response", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        mode, ckpt, chunked, release = args.child.split(",")
        print(json.dumps(child(mode, ckpt == "1", chunked == "1", release == "1", args.batch, args.prompt,
                               args.response, args.threads)))
        return
    rows = []
    for mode in ("full", "lora"):
        for chunked, ckpt, release in ((False, False, False), (True, False, False), (True, True, False),
                                       (True, True, True)):
            cmd = [sys.executable, __file__, "--child", f"{mode},{int(ckpt)},{int(chunked)},{int(release)}",
                   "--batch", str(args.batch), "--prompt", str(args.prompt), "--response", str(args.response),
                   "--threads", str(args.threads)]
            out = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS=str(args.threads)))
            if out.returncode != 0:
                sys.exit(f"bench/update_memory.py: {mode} failed: {out.stderr.strip().splitlines()[-1]}")
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
            r = rows[-1]
            print(f"[memory] {mode} chunked={chunked} checkpointing={ckpt} release={release}: peak {r['peak_mb'] / 1024:.2f} GB "
                  f"(model loaded {r['loaded_mb'] / 1024:.2f} GB), update {r['update_s']:.1f} s", flush=True)
    print(f"\n{args.batch} x {args.prompt + args.response} tokens ({args.response} response), fp32, {args.threads} thread(s)\n")
    print("| fine-tuning | log-probs | gradient checkpointing | release_memory | peak RSS (update) | model loaded | load peak | update time |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {'full, AdamW' if r['mode'] == 'full' else 'LoRA r16, AdamW'} | "
              f"{'chunked' if r['chunked'] else 'whole [B, R, V]'} | {'on' if r['checkpointing'] else 'off'} | "
              f"{'on' if r['release'] else 'off'} | "
              f"{r['peak_mb'] / 1024:.2f} GB{'' if r['peak_is_update_only'] else ' (whole process)'} | "
              f"{r['loaded_mb'] / 1024:.2f} GB | {r['load_peak_mb'] / 1024:.2f} GB | {r['update_s']:.1f} s |")


if __name__ == "__main__":
    main()
