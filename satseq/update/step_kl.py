"""How far one update moved a policy, per response token: the stability statistic of ``satseq compare``.

For the stage's batch, whose response tokens ``y_t`` were sampled from the policy before the update
π_old (the stage's rollout), with ``r_t = π_new(y_t | s_t) / π_old(y_t | s_t)`` the k3 estimator
(Schulman, "Approximating KL divergence", 2020; ``satseq.algos.kl.kl_penalty``, clamped to
[−10, 10] as verl does)::

    k3_t = r_t − 1 − log r_t   ≥ 0,   E_{y_t ~ π_old}[k3_t] = KL(π_old(·|s_t) ‖ π_new(·|s_t))

for a token drawn independently of the update. Here it is measured on the batch the update was fit
to: the update raised or lowered exactly these tokens' probabilities, so it over-states the per-state
KL at fresh samples (on a random tiny model a SAT-Seq step that passed its exact check, q99 ≤ 0.05,
gave a k3 q99 of 0.69). It is a measure of how far the step moved the policy *where it trained*,
the same for every method, from the old and new log-probs of the sampled tokens alone (no logits
over the vocabulary). Reported over the batch's response tokens: ``kl_step_q99`` (the 0.99 quantile,
linear interpolation as ``torch.quantile``: ``satseq.algos.kl.kl_quantile``, the statistic SAT-Seq's
check uses), ``kl_step_max`` and ``kl_step_mean``. SAT-Seq's own
``kl_quantile`` / ``kl_max`` (its check's exact per-state KL by default) are a different measurement,
logged beside.
"""
from __future__ import annotations

from torch import Tensor

from satseq.algos.kl import kl_penalty, kl_quantile

QUANTILE = 0.99


def step_kl_stats(old_lp: Tensor, new_lp: Tensor, mask: Tensor) -> dict:
    """``{kl_step_q99, kl_step_max, kl_step_mean}`` of the per-token k3 estimate of
    KL(π_old ‖ π_new) at the response tokens ``mask`` selects (``[B, T]`` each; widths may differ:
    the common prefix is used, padding is masked out)."""
    w = min(old_lp.shape[1], new_lp.shape[1], mask.shape[1])
    old, new = old_lp[:, :w].detach().float().cpu(), new_lp[:, :w].detach().float().cpu()
    valid = mask[:, :w].bool().cpu()
    k3 = kl_penalty(old, new, "k3")[valid]
    if k3.numel() == 0:
        return {"kl_step_q99": 0.0, "kl_step_max": 0.0, "kl_step_mean": 0.0}
    return {"kl_step_q99": kl_quantile(k3, QUANTILE), "kl_step_max": float(k3.max()),
            "kl_step_mean": float(k3.double().mean())}
