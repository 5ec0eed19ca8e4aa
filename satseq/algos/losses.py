"""Policy-gradient losses and verl's loss aggregation.

``agg_loss`` (verl ``core_algos.agg_loss``), ``loss_mat`` and ``mask`` ``[B, T]``:

- ``token-mean``:              sum(loss * mask) / sum(mask)                    (DAPO)
- ``seq-mean-token-mean``:     mean_b [ sum_t(loss * mask) / sum_t(mask) ]     (GRPO)
- ``seq-mean-token-sum``:      mean_b [ sum_t(loss * mask) ]
- ``seq-mean-token-sum-norm``: sum_b [ sum_t(loss * mask) ] / norm_const      (Dr. GRPO; the
  divisor defaults to T = ``mask.shape[-1]``, as verl; pass a constant to keep it fixed)

Sequences with no valid token are left out of the ``seq-mean-token-mean`` mean (verl >= 0.5).

PPO clipped surrogate (``ppo``; GRPO, DAPO clip-higher and Dr. GRPO are this with other clip
ranges and aggregation), per token with ``r = exp(logp - old_logp)`` (the token form,
:func:`clipped_token_loss`, is the one SAT-Seq's ``ratio="token"`` uses too)::

    L = max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high))
    and, for A < 0, dual clip: L = min(L, -A * clip_ratio_c)   (verl default c = 3)

GSPO (``gspo``, arXiv 2507.18071), sequence ratio ``s_i = exp(mean_t log r_{i,t})`` clipped on
``s_i``; implemented in verl's token form ``log s_{i,t} = logp_t - sg(logp_t) + sg(log s_i)``
whose value is ``s_i`` at every token and whose gradient is GSPO's.

``advantages`` may be ``[B]`` (broadcast to tokens) or ``[B, T]``.

**The clipped policy-gradient loss signature** (every loss an updater selects by name through
``ppo.policy_loss`` or ``sat_seq.policy_loss``; registering a function with it is enough to use
it from YAML)::

    loss_fn(logp, old_logp, advantages, mask, *, clip_low, clip_high, agg_mode,
            is_weight=None, kl=None, beta=0.0, **options) -> (loss, metrics)

``logp`` / ``old_logp`` / ``mask`` ``[B, T]``; ``is_weight`` ``[B]`` a detached per-sequence weight
on the surrogate (SAT-Seq's truncated IS factor; None = 1); ``kl`` ``[B, T]`` a per-token KL
estimate added as ``beta · agg(kl)`` (the metric ``kl`` reports ``agg(kl)``); ``metrics`` holds at
least ``clipfrac``. Options a loss does not take are an error of the caller, never ignored.
"""
from __future__ import annotations

import torch
from torch import Tensor

from satseq.algos.registry import register_loss
from satseq.errors import ConfigError

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``x`` over entries where ``mask`` is set (0 when there are none)."""
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1.0)


def agg_loss(loss_mat: Tensor, mask: Tensor, mode: str = "token-mean", norm_const: float | None = None) -> Tensor:
    """Aggregate a ``[B, T]`` loss matrix into a scalar, verl's four modes (module docstring)."""
    m = mask.to(loss_mat.dtype)
    if mode == "token-mean":
        return masked_mean(loss_mat, m)
    seq_sum = (loss_mat * m).sum(-1)
    if mode == "seq-mean-token-sum":
        return seq_sum.mean()
    if mode == "seq-mean-token-mean":
        n_tok = m.sum(-1)
        has = (n_tok > 0).to(loss_mat.dtype)
        return (seq_sum / n_tok.clamp(min=1.0) * has).sum() / has.sum().clamp(min=1.0)
    if mode == "seq-mean-token-sum-norm":
        denom = float(mask.shape[-1]) if norm_const is None else float(norm_const)
        return seq_sum.sum() / denom
    raise ConfigError(f"unknown loss_agg_mode '{mode}' (known: {', '.join(AGG_MODES)})")


def token_advantages(advantages: Tensor, like: Tensor) -> Tensor:
    """``advantages`` ``[B]`` broadcast to every token of ``like`` ``[B, T]``, or ``[B, T]`` as it is."""
    if advantages.dim() == 1:
        return advantages.unsqueeze(-1).expand_as(like)
    if advantages.shape != like.shape:
        raise ValueError(f"advantages must be [B] or [B, T]={tuple(like.shape)}, got {tuple(advantages.shape)}")
    return advantages


def _weighted_with_kl(loss_mat: Tensor, mask: Tensor, agg_mode: str, norm_const, is_weight, kl, beta):
    """``agg(c_b · loss_mat) + beta · agg(kl)`` (the shared tail of the clipped losses); returns
    (loss, agg(kl) or None)."""
    if is_weight is not None:
        loss_mat = loss_mat * is_weight.detach().to(loss_mat.dtype).unsqueeze(-1)
    loss = agg_loss(loss_mat, mask, agg_mode, norm_const)
    if kl is None:
        return loss, None
    kl_term = agg_loss(kl, mask, agg_mode, norm_const)
    return loss + beta * kl_term, kl_term


def clipped_token_loss(logp: Tensor, old_logp: Tensor, adv: Tensor, clip_low: float,
                       clip_high: float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The per-token clipped surrogate as a loss, the one token-level form every clipped loss uses
    (``ppo``; SAT-Seq's ``ratio="token"``)::

        log r_t = clamp(logp_t - sg(old_logp_t), -20, 20),   r_t = exp(log r_t)
        l1 = -A_t r_t,   l2 = -A_t clip(r_t, 1 - clip_low, 1 + clip_high)
        L_t = max(l1, l2) = -min(r_t A_t, clip(r_t) A_t)

    ``adv`` ``[B, T]`` (detached by the caller). Returns ``(log r, r, L, clipped)`` with ``clipped``
    the tokens where the clipped term is the one taken (``l2 > l1``); no mask applied."""
    log_ratio = torch.clamp(logp - old_logp.detach(), min=-20.0, max=20.0)
    ratio = torch.exp(log_ratio)
    l1 = -adv * ratio
    l2 = -adv * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    return log_ratio, ratio, torch.maximum(l1, l2), l2 > l1


def _clip_metrics(clipped: Tensor, log_ratio: Tensor, ratio: Tensor, mask: Tensor, kl_term, dtype) -> dict[str, float]:
    """``{clipfrac, approx_kl, ratio_mean[, kl]}``: token means over ``mask`` of the clipped tokens,
    of ``-log r`` and of the ratio; ``kl`` = agg(kl) when the loss has a KL term."""
    with torch.no_grad():
        metrics = {
            "clipfrac": masked_mean(clipped.to(dtype), mask).item(),
            "approx_kl": masked_mean(-log_ratio, mask).item(),
            "ratio_mean": masked_mean(ratio, mask).item(),
        }
        if kl_term is not None:
            metrics["kl"] = float(kl_term.detach())
    return metrics


@register_loss("ppo")
def ppo_clip_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    agg_mode: str = "token-mean",
    clip_ratio_c: float | None = 3.0,
    norm_const: float | None = None,
    is_weight: Tensor | None = None,
    kl: Tensor | None = None,
    beta: float = 0.0,
) -> tuple[Tensor, dict[str, float]]:
    """Clipped PPO surrogate with dual clip; returns (loss, {clipfrac, approx_kl, ratio_mean[, kl]})."""
    adv = token_advantages(advantages, logp).detach()
    log_ratio, ratio, loss_mat, clipped = clipped_token_loss(logp, old_logp, adv, clip_low, clip_high)
    if clip_ratio_c is not None:
        loss_mat = torch.where(adv < 0, torch.minimum(loss_mat, -adv * clip_ratio_c), loss_mat)
    loss, kl_term = _weighted_with_kl(loss_mat, mask, agg_mode, norm_const, is_weight, kl, beta)
    return loss, _clip_metrics(clipped, log_ratio, ratio, mask, kl_term, logp.dtype)


@register_loss("gspo")
def gspo_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
    agg_mode: str = "seq-mean-token-mean",
    norm_const: float | None = None,
    is_weight: Tensor | None = None,
    kl: Tensor | None = None,
    beta: float = 0.0,
) -> tuple[Tensor, dict[str, float]]:
    """GSPO sequence-ratio clipped loss; returns (loss, {clipfrac, approx_kl, ratio_mean[, kl]})."""
    adv = token_advantages(advantages, logp).detach()
    m = mask.to(logp.dtype)
    log_ratio = logp - old_logp.detach()
    seq_log_ratio = (log_ratio * m).sum(-1) / m.sum(-1).clamp(min=1.0)
    log_s = logp - logp.detach() + seq_log_ratio.detach().unsqueeze(-1)
    s = torch.exp(torch.clamp(log_s, max=10.0))
    l1 = -adv * s
    l2 = -adv * torch.clamp(s, 1.0 - clip_low, 1.0 + clip_high)
    loss, kl_term = _weighted_with_kl(torch.maximum(l1, l2), mask, agg_mode, norm_const, is_weight, kl, beta)
    return loss, _clip_metrics(l2 > l1, log_ratio, s, mask, kl_term, logp.dtype)
