"""A*-PO stage-2 loss: least-squares regression onto the optimal advantage (policy loss ``apo``).

For sequence b with response tokens t in ``mask[b]``, reward r_b and the offline V*(x_b) (spec
``apo_pag.md``, "A*-PO", stage 2; arXiv 2505.20686)::

    s_b  = sum_t [log pi_theta(y_t | ...) - log pi_ref(y_t | ...)]       (sum, not mean)
    L    = mean_b ( beta2 * s_b + V*(x_b) - r_b )^2  -  entropy_coef * H
    H    = mean over valid tokens of the per-token entropy (when given)

i.e. ``beta2 * log(pi/pi_ref)(y|x)`` regresses onto the optimal advantage ``r - V*(x)``. No
importance ratio, no clipping, no critic, no KL in the reward. The mean runs over all B sequences
(a sequence with no valid token adds the constant (V* - r)^2 and no gradient). ``ref_logp``,
``rewards`` and ``vstar`` are treated as constants (detached); ``entropy``, if given, keeps its
graph so the bonus is trained. Gradient per valid token: ``2 beta2 (beta2 s_b + V*_b - r_b) / B``.
"""
from __future__ import annotations

import torch
from torch import Tensor

from satseq.algos.registry import register_loss


def _check_b(name: str, x: Tensor, b: int) -> Tensor:
    x = torch.as_tensor(x)
    if x.dim() != 1 or x.shape[0] != b:
        raise ValueError(f"{name} must be [B={b}], got shape {tuple(x.shape)}")
    return x


@register_loss("apo", kind="regression")
def apo_loss(
    logp: Tensor,
    ref_logp: Tensor,
    mask: Tensor,
    rewards: Tensor,
    vstar: Tensor,
    beta2: float = 1e-3,
    entropy: Tensor | None = None,
    entropy_coef: float = 0.001,
) -> tuple[Tensor, dict[str, float]]:
    """A*-PO loss on ``[B, T]`` log-probs; returns (loss, {loss, adv_mean, seq_log_ratio[, entropy]})."""
    if ref_logp.shape != logp.shape or mask.shape != logp.shape or logp.dim() != 2:
        raise ValueError(f"logp, ref_logp and mask must share one [B, T] shape, got "
                         f"{tuple(logp.shape)}, {tuple(ref_logp.shape)}, {tuple(mask.shape)}")
    b = logp.shape[0]
    valid = mask.bool()
    adv = (_check_b("rewards", rewards, b).to(logp) - _check_b("vstar", vstar, b).to(logp)).detach()
    # where(), not a product: padding positions may hold -inf/nan log-probs.
    log_ratio = torch.where(valid, logp - ref_logp.detach(), torch.zeros((), dtype=logp.dtype, device=logp.device))
    seq_log_ratio = log_ratio.sum(-1)
    residual = beta2 * seq_log_ratio - adv
    loss = residual.pow(2).mean()
    ent_mean = None
    if entropy is not None:
        if entropy.shape != logp.shape:
            raise ValueError(f"entropy must be [B, T]={tuple(logp.shape)}, got {tuple(entropy.shape)}")
        ent = torch.where(valid, entropy, torch.zeros((), dtype=entropy.dtype, device=entropy.device))
        ent_mean = ent.sum() / valid.sum().clamp(min=1)
        loss = loss - entropy_coef * ent_mean
    with torch.no_grad():
        metrics = {
            "loss": loss.item(),
            "adv_mean": adv.mean().item(),
            "seq_log_ratio": seq_log_ratio.mean().item(),
        }
        if ent_mean is not None:
            metrics["entropy"] = ent_mean.item()
    return loss, metrics
