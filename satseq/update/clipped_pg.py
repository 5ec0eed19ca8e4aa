"""One clipped policy-gradient update over a turn batch: GRPO, PAG and MLMT share it.

Given turns with one advantage each (every token carries it), for ``epochs`` passes over shuffled
mini-batches: the policy loss named by ``loss`` (``ppo.policy_loss``; default ``ppo``, the
per-token clipped surrogate ``min(r A, clip(r, 1−ε_low, 1+ε_high) A)``; ``gspo`` the sequence
ratio) aggregated by ``agg_mode`` (verl's ``agg_loss``), with ``kl_coef · k3(π_θ, π_ref)`` passed
to the loss as its KL term when ``kl_coef > 0``. With ``seq-mean-token-sum-norm`` (Dr. GRPO, arXiv
2503.20783) each sequence's token sum is divided by the constant ``norm_tokens`` (the generation
budget ``rollout.max_new_tokens``) and averaged over a full mini-batch: ``norm_const =
norm_tokens · min(mini_batch_size, len(batch))``, the same for every mini-batch. ``old``
log-probs are recomputed once before the first step (the engine's behaviour log-probs are only a
cross-check), except when one epoch fits in one mini-batch: then the data is on-policy, the grad
pass's detached log-probs are the old ones and the extra forward is skipped. With ``step_kl``
(``trainer.step_kl``) one no-grad forward after the last step gives the new policy's log-probs of the
batch, and ``kl_step_q99`` / ``kl_step_max`` / ``kl_step_mean`` (:mod:`satseq.update.step_kl`)
compare them with the old ones; nothing else changes (on-policy with dropout: one more no-grad
forward before the first step, used only for these statistics). With ``rollout.is_correction``
(on by default with the vLLM engine) each advantage is weighted by the truncated ratio of the trainer's
old log-probs to the engine's (:mod:`satseq.update.engine_correction`); ``is_engine_mean`` and
``is_engine_truncated`` are logged per agent.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from satseq.algos.kl import kl_penalty
from satseq.algos import get_loss
from satseq.update.batch import TurnBatch, batch_logprobs
from satseq.update.engine_correction import EngineCorrection, corrected_advantages
from satseq.update.loop import fit_minibatches, has_dropout, mean, policy_temperature, reference_logprobs
from satseq.update.step_kl import step_kl_stats


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
    loss: str = "ppo"
    norm_tokens: int | None = None  # seq-mean-token-sum-norm: the per-sequence constant (None = batch width)
    step_kl: bool = False  # log the k3 KL between the policy before and after the update (one more forward)
    correction: EngineCorrection = EngineCorrection()  # rollout.is_correction: the engine-mismatch TIS weight

    @classmethod
    def from_config(cls, cfg) -> "PGSettings":
        """The common ``ppo`` section's settings (with ``trainer``'s and ``rollout``'s that apply)."""
        g = cfg.ppo
        return cls(epochs=g.ppo_epochs, mini_batch_size=g.mini_batch_size, clip_low=g.epsilon_low,
                   clip_high=g.epsilon_high, agg_mode=g.loss_agg_mode, kl_coef=g.kl_coef,
                   grad_clip=cfg.trainer.grad_clip, temperature=policy_temperature(cfg), loss=g.policy_loss,
                   norm_tokens=cfg.rollout.max_new_tokens, step_kl=cfg.trainer.step_kl,
                   correction=EngineCorrection.from_config(cfg))


def is_on_policy(s: PGSettings, n: int) -> bool:
    """One epoch in one mini-batch: every step's data comes from the current policy, so the ratio is
    exactly 1 and the grad pass's detached log-probs are the old ones (the no-grad forward is skipped,
    as TRL does)."""
    return s.epochs == 1 and n <= s.mini_batch_size


def behaviour_gap(lp: torch.Tensor, mask: torch.Tensor, behaviour: list[list[float]]) -> float:
    """Mean |log π_train(y_t) − log π_rollout(y_t)| over response tokens: how far the engine's sampling
    policy (another precision, another kernel) is from the policy the loss trains. Diagnostic only:
    the loss uses the trainer's own log-probs, so on-policy ratios are exactly 1 either way."""
    beh = torch.zeros_like(lp, dtype=torch.float32)
    for i, b in enumerate(behaviour):
        n = min(len(b), beh.shape[1])
        beh[i, :n] = torch.tensor(b[:n])
    m = mask.float()
    return float(((lp.detach().float() - beh).abs() * m).sum() / m.sum().clamp(min=1))


def clipped_pg_update(pool, agent: str, opt: torch.optim.Optimizer, batch: TurnBatch, s: PGSettings, *,
                      generator: torch.Generator, device, reference: str | None = None) -> dict:
    """Update agent ``agent`` on ``batch``; ``reference`` names whose reference the KL term uses
    (default ``agent``). Returns mean ``loss``, ``clipfrac`` and (with KL) ``kl_ref``."""
    if len(batch) == 0:
        return {}
    loss_fn = get_loss(s.loss)
    pad_id = pool.tokenizer.pad_token_id
    model = pool.module(agent)
    old_lp = None if is_on_policy(s, len(batch)) else batch_logprobs(model, batch, pad_id, temperature=s.temperature, device=device)[0]
    # the old policy's log-probs for the step-KL statistic: the loss's, else (on-policy) the grad pass's at
    # θ_old, unless dropout makes that pass differ from an eval-mode forward
    stat_old = old_lp
    if s.step_kl and old_lp is None and has_dropout(model):
        stat_old = batch_logprobs(model, batch, pad_id, temperature=s.temperature, device=device)[0]
    # the engine correction compares the engine with the policy that sampled, in eval mode: on-policy with
    # dropout (LoRA's), the grad pass's log-probs carry dropout noise, so one no-grad forward gives them
    tis_old = old_lp
    if s.correction.on and old_lp is None and has_dropout(model):
        tis_old = stat_old if stat_old is not None else batch_logprobs(model, batch, pad_id, temperature=s.temperature,
                                                                        device=device)[0]
    ref_lp = None
    if s.kl_coef > 0:
        ref_lp = reference_logprobs(pool, reference or agent, batch, temperature=s.temperature, device=device)
        model = pool.module(agent)
    clipfracs, kls, is_stats, gap = [], [], [], None
    extra = {}
    if s.agg_mode == "seq-mean-token-sum-norm" and s.norm_tokens:
        extra["norm_const"] = float(s.norm_tokens * min(s.mini_batch_size, len(batch)))

    def step_loss(idx, mb, lp, m, _logdist):
        nonlocal gap, stat_old
        w = lp.shape[1]
        kl = kl_penalty(lp, ref_lp[idx][:, :w], "k3") if ref_lp is not None else None
        old = lp.detach() if old_lp is None else old_lp[idx][:, :w]
        old_eval = old if tis_old is None else tis_old[idx][:, :w]  # θ_old's log-probs, no dropout
        if gap is None:  # before the first step: the trainer's log-probs of the behaviour policy's samples
            gap = behaviour_gap(old_eval, m, mb.behaviour_logprobs)
        if s.step_kl and stat_old is None:  # on-policy: one mini-batch, the whole batch permuted by idx
            stat_old = lp.detach()[torch.argsort(idx)]
        adv, st = corrected_advantages(s.correction, mb.advantages.to(lp.device), old_eval, m, mb.behaviour_logprobs)
        if st:
            is_stats.append(st)
        loss, lm = loss_fn(lp, old, adv, m, clip_low=s.clip_low,
                           clip_high=s.clip_high, agg_mode=s.agg_mode, kl=kl, beta=s.kl_coef, **extra)
        if kl is not None:
            kls.append(lm["kl"])
        clipfracs.append(float(lm["clipfrac"]))
        return loss

    losses = fit_minibatches(pool, agent, model, opt, batch, step_loss, epochs=s.epochs, size=s.mini_batch_size,
                             generator=generator, temperature=s.temperature, device=device, grad_clip=s.grad_clip)
    out = {"loss": mean(losses), "clipfrac": mean(clipfracs), "logprob_gap": gap}
    for k in (is_stats[0] if is_stats else {}):  # the engine-mismatch correction's weights, per agent
        out[k] = mean([st[k] for st in is_stats])
    if kls:
        out["kl_ref"] = mean(kls)
    if s.step_kl:
        new_lp, mask = batch_logprobs(model, batch, pad_id, temperature=s.temperature, device=device)
        out.update(step_kl_stats(stat_old, new_lp, mask))
    return out
