"""SAT-Seq sequence-ratio loss (spec, "Per stage" step 4, ``loss/seq_ratio_loss``).

For sequence (agent turn) b with tokens t in ``mask[b]``, advantage A_b, detached truncated-IS
weight c_b and a per-token KL estimate kl_{b,t} supplied by the caller::

    ratio="sequence":  r_b = exp( mean_t [logp_{b,t} - cur_logp_{b,t}] )
                       surr_b = min(r_b A_b, clip(r_b, 1-eps, 1+eps) A_b)
    ratio="product":   same with r_b = exp( sum_t [logp - cur_logp] )
    ratio="token":     surr_b = mean_t min(r_{b,t} A_{b,t}, clip(r_{b,t}, 1-eps, 1+eps) A_{b,t})
                       (-L_t of the shared token surrogate, satseq.algos.losses.clipped_token_loss)

    L_b = -c_b * surr_b + beta * mean_t kl_{b,t}
    loss = mean_b L_b              (over sequences with at least one token)

It has the clipped policy-gradient signature of :mod:`satseq.algos.losses` (``clip_low`` /
``clip_high`` bound the ratio at ``1 - clip_low`` and ``1 + clip_high``; SAT-Seq sets both to
``sat_seq.epsilon``); its aggregation is per sequence, so ``agg_mode`` must be
``seq-mean-token-mean``. The extra option ``ratio`` picks the ratio form.

``logp`` is log pi_theta (with grad), ``cur_logp`` log pi_cur (the stage's data policy).
Log-ratios are clamped to [-20, 20] before exp (as verl). ``advantages`` may be ``[B]`` or
``[B, T]``; in the sequence/product modes a ``[B, T]`` advantage is averaged over the mask.
Which KL estimator feeds ``kl`` is the caller's choice (``satseq.algos.kl``: k1/k2/k3 at sampled
tokens, or the exact KL over the vocabulary per position).
"""
from __future__ import annotations

import torch
from torch import Tensor

from satseq.algos.losses import token_advantages, clipped_token_loss
from satseq.algos.registry import register_loss
from satseq.errors import ConfigError

RATIO_MODES = ("sequence", "token", "product")


@register_loss("sat_seq")
def seq_ratio_loss(
    logp: Tensor,
    cur_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    agg_mode: str = "seq-mean-token-mean",
    is_weight: Tensor | None = None,
    kl: Tensor | None = None,
    beta: float = 0.0,
    ratio: str = "sequence",
) -> tuple[Tensor, dict[str, float]]:
    """SAT-Seq per-sequence clipped loss; returns (loss, {clipfrac, ratio_mean, kl_mean, is_weight_mean})."""
    if ratio not in RATIO_MODES:
        raise ConfigError(f"unknown sat_seq ratio '{ratio}' (known: {', '.join(RATIO_MODES)})")
    if agg_mode != "seq-mean-token-mean":
        raise ConfigError(f"policy loss 'sat_seq' aggregates per sequence (seq-mean-token-mean), got '{agg_mode}'")
    m = mask.to(logp.dtype)
    n_tok = m.sum(-1)
    valid = (n_tok > 0).to(logp.dtype)
    n_seq = valid.sum().clamp(min=1.0)
    denom = n_tok.clamp(min=1.0)
    c = torch.ones_like(n_tok) if is_weight is None else is_weight.detach().to(logp.dtype)

    if ratio == "token":  # the shared token-level surrogate (satseq.algos.losses.clipped_token_loss)
        adv = token_advantages(advantages, logp).detach()
        _, r_tok, loss_tok, clipped_tok = clipped_token_loss(logp, cur_logp, adv, clip_low, clip_high)
        surr = (-loss_tok * m).sum(-1) / denom
        clipped = (clipped_tok.to(logp.dtype) * m).sum() / m.sum().clamp(min=1.0)
        r_mean = (r_tok * m).sum() / m.sum().clamp(min=1.0)
    else:
        log_ratio = torch.clamp(logp - cur_logp.detach(), min=-20.0, max=20.0) * m
        adv = advantages if advantages.dim() == 1 else (advantages * m).sum(-1) / denom
        adv = adv.detach()
        s = log_ratio.sum(-1)
        r_seq = torch.exp(torch.clamp(s / denom if ratio == "sequence" else s, min=-20.0, max=20.0))
        u = r_seq * adv
        v = torch.clamp(r_seq, 1.0 - clip_low, 1.0 + clip_high) * adv
        surr = torch.minimum(u, v)
        clipped = ((v < u).to(logp.dtype) * valid).sum() / n_seq
        r_mean = (r_seq * valid).sum() / n_seq

    kl_seq = torch.zeros_like(surr) if kl is None else (kl * m).sum(-1) / denom
    per_seq = -c * surr + beta * kl_seq
    loss = (per_seq * valid).sum() / n_seq
    with torch.no_grad():
        metrics = {
            "clipfrac": float(clipped),
            "ratio_mean": float(r_mean),
            "kl_mean": float((kl_seq * valid).sum() / n_seq),
            "is_weight_mean": float((c * valid).sum() / n_seq),
        }
    return loss, metrics
