"""One clipped policy-gradient update over a turn batch: GRPO, PAG and MLMT share it.

Given turns with one advantage each (every token carries it), for ``epochs`` passes over shuffled
mini-batches: the per-token clipped surrogate ``min(r A, clip(r, 1−ε_low, 1+ε_high) A)`` (loss
``ppo`` of the registry), aggregated by ``agg_mode`` (verl's ``agg_loss``), plus
``kl_coef · k3(π_θ, π_ref)`` when ``kl_coef > 0``; ``old`` log-probs are recomputed once before
the first step (the engine's behaviour log-probs are only a cross-check).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from satseq.algos import get_loss
from satseq.algos.kl import kl_penalty
from satseq.algos.losses import agg_loss
from satseq.trainers.turn_batch import TurnBatch, batch_logprobs, minibatch_indices, optimizer_step


@dataclass
class PGSettings:
    epochs: int = 1
    mini_batch_size: int = 64
    clip_low: float = 0.2
    clip_high: float = 0.2
    agg_mode: str = "seq-mean-token-mean"
    kl_coef: float = 0.0
    grad_clip: float = 1.0
    temperature: float = 1.0

    @classmethod
    def from_grpo(cls, cfg) -> "PGSettings":
        g = cfg.grpo
        return cls(epochs=g.ppo_epochs, mini_batch_size=g.mini_batch_size, clip_low=g.epsilon_low,
                   clip_high=g.epsilon_high, agg_mode=g.loss_agg_mode, kl_coef=g.kl_coef,
                   grad_clip=cfg.trainer.grad_clip,
                   temperature=cfg.rollout.temperature if cfg.rollout.temperature > 0 else 1.0)


def clipped_pg_update(pool, agent: str, opt: torch.optim.Optimizer, batch: TurnBatch, s: PGSettings, *,
                      generator: torch.Generator, device, reference: str | None = None) -> dict:
    """Update agent ``agent`` on ``batch``; ``reference`` names whose reference the KL term uses
    (default ``agent``). Returns mean ``loss``, ``clipfrac`` and (with KL) ``kl_ref``."""
    if len(batch) == 0:
        return {}
    loss_fn = get_loss("ppo")
    pad_id = pool.tokenizer.pad_token_id
    model = pool.module(agent)
    params = pool.parameters(agent)
    old_lp, _ = batch_logprobs(model, batch, pad_id, temperature=s.temperature, device=device)
    ref_lp = None
    if s.kl_coef > 0:
        with pool.reference(reference or agent) as ref:
            ref_lp, _ = batch_logprobs(ref, batch, pad_id, temperature=s.temperature, device=device)
        model = pool.module(agent)  # LoRA: re-activate the adapter after the reference pass
    losses, clipfracs, kls = [], [], []
    model.train()
    for _ in range(s.epochs):
        for idx in minibatch_indices(len(batch), s.mini_batch_size, generator):
            mb = batch.select(idx)
            lp, m = batch_logprobs(model, mb, pad_id, temperature=s.temperature, device=device, grad=True,
                                   chunk=len(mb))
            w = lp.shape[1]
            loss, lm = loss_fn(lp, old_lp[idx][:, :w], mb.advantages.to(lp.device), m,
                               clip_low=s.clip_low, clip_high=s.clip_high, agg_mode=s.agg_mode)
            if ref_lp is not None:
                kl = agg_loss(kl_penalty(lp, ref_lp[idx][:, :w], "k3"), m, s.agg_mode)
                loss = loss + s.kl_coef * kl
                kls.append(float(kl.detach()))
            losses.append(optimizer_step(opt, loss, params, s.grad_clip))
            clipfracs.append(float(lm["clipfrac"]))
    model.eval()
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    out = {"loss": mean(losses), "clipfrac": mean(clipfracs)}
    if kls:
        out["kl_ref"] = mean(kls)
    return out
