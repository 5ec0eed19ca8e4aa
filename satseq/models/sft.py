"""Supervised warm start (SFT): next-token cross-entropy on completions only.

``L = −(1/N) Σ_{completion tokens} log π(y_t | x, y_<t)`` (token mean over the batch), AdamW with
a linear warm-up and cosine decay. Batches use the same padding layout as rollouts and RL
(:mod:`satseq.rollout.padding`), so positions match what the policy later sees.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch

from satseq.rollout.logprobs import response_logprobs
from satseq.utils.progress import progress_bar


@dataclass
class SFTConfig:
    steps: int = 400
    batch_size: int = 64
    lr: float = 2e-3
    warmup_steps: int = 20
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    seed: int = 0


def cosine_lr(step: int, cfg: SFTConfig) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.lr * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def run_sft(model, tokenizer, examples: list[tuple[str, str]], cfg: SFTConfig, *, device="cpu",
            show_progress: bool = True, log=None) -> list[float]:
    """Train ``model`` in place on (prompt, completion) pairs; an EOS token ends each completion."""
    rng = random.Random(cfg.seed)
    torch.manual_seed(cfg.seed)
    enc = lambda s: tokenizer(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    data = [(enc(p), enc(c) + [tokenizer.eos_token_id]) for p, c in examples]
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.98))
    model.train()
    losses: list[float] = []
    order: list[int] = []
    with progress_bar(cfg.steps, "SFT warm start", enabled=show_progress) as bar:
        for step in range(cfg.steps):
            if len(order) < cfg.batch_size:
                more = list(range(len(data)))
                rng.shuffle(more)
                order.extend(more)
            batch = [data[i] for i in order[: cfg.batch_size]]
            del order[: cfg.batch_size]
            for g in opt.param_groups:
                g["lr"] = cosine_lr(step, cfg)
            lp, mask = response_logprobs(model, [p for p, _ in batch], [c for _, c in batch],
                                         tokenizer.pad_token_id, device=device)
            loss = -(lp * mask).sum() / mask.sum()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            losses.append(float(loss.detach()))
            if log is not None and (step % 50 == 0 or step == cfg.steps - 1):
                log({"sft/loss": float(loss), "sft/lr": cosine_lr(step, cfg)}, step)
            bar.advance(1, loss=f"{losses[-1]:.3f}")
    model.eval()
    return losses
