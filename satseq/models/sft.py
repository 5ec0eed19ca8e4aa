"""Supervised warm start (SFT): next-token cross-entropy on completions only.

``L = −(1/N) Σ_{completion tokens} log π(y_t | x, y_<t)`` (token mean over the batch), AdamW.

Two schedules:

* fixed length (``target=None``): linear warm-up, then cosine decay to 0 at ``steps``;
* trained to a validation target (``target`` set, with a ``validate(model) -> float`` callback):
  linear warm-up, constant ``lr`` until ``validate`` reaches ``target`` (checked every
  ``check_every`` steps, at most ``steps − cooldown_steps`` steps), then a cosine cool-down of
  ``cooldown_steps`` to 0. The run stops where the model *is* (a measured skill), not at a step count
  that lands a fast and a slow floating-point trajectory in different regimes
  (docs/embedded_default.md, "Warm-start recipe").
* the same with a **settling phase** (``settle_lr`` set, with a second callback ``settle``): once
  ``validate`` reaches ``target``, constant ``settle_lr`` (< ``lr``) until ``settle`` reaches
  ``target`` too, then the cool-down from ``settle_lr``. For a skill that a high learning rate keeps
  swinging between checks (MLMT's single pass: 0.44–0.92 at 2e-3 with the rest learned), a lower rate
  lets it settle where a check can see it.

Batches use the same padding layout as rollouts and RL (:mod:`satseq.rollout.padding`), so positions
match what the policy later sees.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace
from typing import Callable, Optional

import torch

from satseq.rollout.logprobs import response_logprobs
from satseq.utils.progress import progress_bar


@dataclass
class SFTConfig:
    steps: int = 400  # fixed length; with a target, the cap (cool-down included)
    batch_size: int = 64
    lr: float = 2e-3
    warmup_steps: int = 20
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    seed: int = 0
    target: Optional[float] = None  # validation score that ends the constant-lr phase
    check_every: int = 50
    cooldown_steps: int = 150
    settle_lr: Optional[float] = None  # after the target: constant at this lr until ``settle`` reaches it too


@dataclass
class SFTResult:
    losses: list[float]
    checks: list[dict] = field(default_factory=list)  # {"step", "score", "phase"} per validation
    steps: int = 0
    reached_target: Optional[bool] = None  # None without a target


def _warmup_then_cosine(step: int, cfg: SFTConfig, decay_from: Optional[int], decay_steps: int) -> float:
    """Linear warm-up over ``warmup_steps``, ``lr`` until ``decay_from`` (never when None), then
    ``lr · ½(1 + cos(π · min(1, (step − decay_from) / decay_steps)))``."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if decay_from is None or step < decay_from:
        return cfg.lr
    progress = (step - decay_from) / max(1, decay_steps)
    return cfg.lr * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def cosine_lr(step: int, cfg: SFTConfig) -> float:
    """Fixed-length schedule: linear warm-up over ``warmup_steps``, cosine decay to 0 at ``steps``."""
    return _warmup_then_cosine(step, cfg, cfg.warmup_steps, cfg.steps - cfg.warmup_steps)


def target_lr(step: int, cfg: SFTConfig, cooldown_from: Optional[int], settle_from: Optional[int] = None) -> float:
    """Target schedule: warm-up, constant ``lr``, from ``settle_from`` (if any) constant ``settle_lr``, then
    cosine to 0 over ``cooldown_steps`` from ``cooldown_from``, starting at the rate it decays from."""
    if settle_from is None or step < settle_from:
        return _warmup_then_cosine(step, cfg, cooldown_from, cfg.cooldown_steps)
    return _warmup_then_cosine(step, replace(cfg, lr=cfg.settle_lr, warmup_steps=0), cooldown_from, cfg.cooldown_steps)


def run_sft(model, tokenizer, examples: list[tuple[str, str]], cfg: SFTConfig, *, device="cpu",
            show_progress: bool = True, log=None, validate: Callable[[object], float] | None = None,
            settle: Callable[[object], float] | None = None, strata: list[int] | None = None) -> SFTResult:
    """Train ``model`` in place on (prompt, completion) pairs; an EOS token ends each completion.

    ``strata`` (one label per example) makes every batch hold the same number of examples of each
    label, each label's examples drawn in its own reshuffled order: a behaviour the corpus mixes at
    fixed shares (the embedded task's careful and hasty styles, ½ each) is then learned at those shares
    without the batch-to-batch sampling noise that a mixed draw adds to the final policy."""
    if cfg.target is not None and validate is None:
        raise ValueError("SFTConfig.target needs a validate(model) callback")
    if cfg.settle_lr is not None and (settle is None or cfg.target is None):
        raise ValueError("SFTConfig.settle_lr needs a target and a settle(model) callback")
    rng = random.Random(cfg.seed)
    torch.manual_seed(cfg.seed)
    enc = lambda s: tokenizer(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    data = [(enc(p), enc(c) + [tokenizer.eos_token_id]) for p, c in examples]
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.98))
    res = SFTResult(losses=[])
    targeted = cfg.target is not None
    cooldown_from: Optional[int] = None
    settle_from: Optional[int] = None
    end = cfg.steps
    labels = sorted(set(strata)) if strata is not None else [None]
    if strata is not None and (len(strata) != len(data) or cfg.batch_size % len(labels)):
        raise ValueError("strata needs one label per example and a batch size divisible by the number of labels")
    members = {lab: [i for i in range(len(data)) if strata is None or strata[i] == lab] for lab in labels}
    queues: dict = {lab: [] for lab in labels}
    per_label = cfg.batch_size // len(labels)

    def next_batch() -> list:
        out = []
        for lab in labels:
            q = queues[lab]
            if len(q) < per_label:
                more = list(members[lab])
                rng.shuffle(more)
                q.extend(more)
            out.extend(q[:per_label])
            del q[:per_label]
        return [data[i] for i in out]

    def check(step: int, phase: str, fn) -> float:
        model.eval()
        score = float(fn(model))
        model.train()
        res.checks.append({"step": step, "score": score, "phase": phase})
        return score

    model.train()
    with progress_bar(cfg.steps, "SFT warm start", enabled=show_progress) as bar:
        step = 0
        while step < end:
            if targeted and cooldown_from is None:
                last_chance = step >= cfg.steps - cfg.cooldown_steps
                due = step > 0 and step % cfg.check_every == 0
                if settle_from is None:
                    reached = not last_chance and due and check(step, "constant", validate) >= cfg.target
                    if reached and cfg.settle_lr is not None:
                        settle_from, reached = step, False
                else:
                    reached = not last_chance and due and step > settle_from and check(step, "settle", settle) >= cfg.target
                if last_chance or reached:
                    cooldown_from, end = step, step + cfg.cooldown_steps
                    res.reached_target = reached
            batch = next_batch()
            lr = target_lr(step, cfg, cooldown_from, settle_from) if targeted else cosine_lr(step, cfg)
            for g in opt.param_groups:
                g["lr"] = lr
            lp, mask = response_logprobs(model, [p for p, _ in batch], [c for _, c in batch],
                                         tokenizer.pad_token_id, device=device)
            loss = -(lp * mask).sum() / mask.sum()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            res.losses.append(float(loss.detach()))
            if log is not None and (step % 50 == 0 or step == end - 1):
                log({"sft/loss": res.losses[-1], "sft/lr": lr}, step)
            step += 1
            bar.advance(1, loss=f"{res.losses[-1]:.3f}")
        if targeted:
            check(step, "final", settle or validate)
    res.steps = step
    model.eval()
    return res
