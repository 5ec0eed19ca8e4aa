"""The coach's reward (MLMT-RL, spec ``mlmt.md``).

For the refined answer ŷ (turn 3) with per-token log-probs under the solver, with the coach's
feedback g in the prompt (``lp_with``) and without it (``lp_without``)::

    conf(ŷ) = (1/|ŷ|) Σ_t log p_φ(ŷ_t | x, z, g, ŷ_<t)                        (solver confidence)
    dep(g)  = (1/|ŷ|) Σ_t [log p_φ(ŷ_t | x, z, g, ŷ_<t) − log p_φ(ŷ_t | x, z, ŷ_<t)]
    R_coach = r(ŷ) + λ_conf · conf(ŷ) + λ_dep · clip(dep(g), 0, dep_max)

dep is a one-sample estimate of KL(p_φ(·|x,z,g) ‖ p_φ(·|x,z)) per token (the seed's "KL
maximization for context utilization"); the clip keeps the coach from being paid for derailing
the solver. The original implementation summed the difference over the sequence and clipped it
above at 10; the per-token, [0, dep_max] form is our refinement (docs/mlmt.md).
"""
from __future__ import annotations

import torch
from torch import Tensor


def confidence(lp_with: Tensor, mask: Tensor) -> Tensor:
    """``[B]`` mean token log-probability of each response (0 for an empty response)."""
    m = mask.to(lp_with.dtype)
    return (lp_with * m).sum(-1) / m.sum(-1).clamp(min=1)


def dependence(lp_with: Tensor, lp_without: Tensor, mask: Tensor) -> Tensor:
    """``[B]`` per-token mean of ``lp_with − lp_without`` over each response (unclipped)."""
    m = mask.to(lp_with.dtype)
    return ((lp_with - lp_without) * m).sum(-1) / m.sum(-1).clamp(min=1)


def coach_reward(correct: Tensor, conf: Tensor, dep: Tensor, *, lambda_conf: float, lambda_dep: float,
                 dep_max: float) -> Tensor:
    """``r(ŷ) + λ_conf · conf + λ_dep · clip(dep, 0, dep_max)``, all ``[B]``."""
    return correct.to(conf.dtype) + lambda_conf * conf + lambda_dep * dep.clamp(min=0.0, max=dep_max)


def solver_scores(model, prompts_with: list[list[int]], prompts_without: list[list[int]],
                  responses: list[list[int]], pad_id: int, *, temperature: float, device) -> tuple[Tensor, Tensor]:
    """(conf, dep) ``[B]`` of the responses under ``model`` (no grad): two forwards, with and without g."""
    from satseq.update.batch import TurnBatch, batch_logprobs

    def lp(prompts):
        b = TurnBatch(prompts, responses, torch.zeros(len(prompts), dtype=torch.long), torch.zeros(len(prompts)),
                      [[] for _ in prompts])
        return batch_logprobs(model, b, pad_id, temperature=temperature, device=device)

    lp_with, mask = lp(prompts_with)
    lp_without, mask2 = lp(prompts_without)
    w = min(lp_with.shape[1], lp_without.shape[1])
    return confidence(lp_with, mask).cpu(), dependence(lp_with[:, :w], lp_without[:, :w], mask[:, :w]).cpu()
