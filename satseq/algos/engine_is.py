"""Truncated importance sampling of the rollout engine's mismatch (TIS).

The engine that samples (vLLM: other kernels, another precision) is not exactly the policy the
trainer scores: ``π_engine(y_t) ≠ π_trainer(y_t)`` by a little. The policy gradient is taken under the
trainer's policy, so each sample is re-weighted by the ratio of the two, truncated at ``C`` so that a
rare token the engine under-sampled cannot blow up the step (Yao et al., "Your efficient RL framework
secretly brings you off-policy RL training", 2025; verl's ``rollout_is``, TRL's
``vllm_importance_sampling_cap``)::

    token:     w_{b,t} = min(C, exp(log π_trainer(y_{b,t}) − log π_engine(y_{b,t})))
    sequence:  w_b     = min(C, exp(Σ_t [log π_trainer(y_{b,t}) − log π_engine(y_{b,t})]))

Both are detached weights on the advantage (``A·w``): for ``w ≥ 0`` the clipped surrogate
``min(r·A·w, clip(r)·A·w)`` equals ``w·min(r·A, clip(r)·A)``, so every clipped policy-gradient loss
(``ppo``, ``gspo``, SAT-Seq's ``sat_seq``) takes it unchanged.
"""
from __future__ import annotations

import torch
from torch import Tensor

LEVELS = ("token", "sequence")


def engine_is_weights(trainer_lp: Tensor, engine_lp: Tensor, mask: Tensor, *, cap: float,
                      level: str = "token") -> tuple[Tensor, dict[str, float]]:
    """Truncated IS weights ``[B, T]`` (token; 0 off the mask) or ``[B]`` (sequence) and their
    statistics: ``is_engine_mean`` (mean weight), ``is_engine_truncated`` (share of weights cut at
    ``cap``), ``logprob_gap_max`` (largest |log-ratio| on the mask)."""
    if level not in LEVELS:
        raise ValueError(f"engine IS level must be one of {LEVELS}, got {level!r}")
    m = mask.to(torch.float32)
    log_ratio = (trainer_lp.detach().float() - engine_lp.float()) * m
    if level == "token":
        raw = torch.exp(log_ratio.clamp(max=20.0))
        w = raw.clamp(max=cap) * m
        n = m.sum().clamp(min=1.0)
        stats = {"is_engine_mean": float(w.sum() / n), "is_engine_truncated": float(((raw > cap).float() * m).sum() / n)}
    else:
        raw = torch.exp(log_ratio.sum(-1).clamp(max=20.0))
        w = raw.clamp(max=cap)
        valid = (m.sum(-1) > 0).float()
        n = valid.sum().clamp(min=1.0)
        stats = {"is_engine_mean": float((w * valid).sum() / n),
                 "is_engine_truncated": float(((raw > cap).float() * valid).sum() / n)}
    stats["logprob_gap_max"] = float(log_ratio.abs().max()) if log_ratio.numel() else 0.0
    return w.detach(), stats
