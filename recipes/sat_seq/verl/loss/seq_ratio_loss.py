"""SAT-Seq's sequence-ratio loss as verl policy losses (``actor_rollout_ref.actor.policy_loss.loss_mode``).

The loss is satseq's ``satseq.methods.sat_seq.loss.seq_ratio_loss`` (per sequence b of agent i's turns)::

    L_b = -c_b * min(r_b A_b, clip(r_b, 1-eps, 1+eps) A_b) + beta * mean_t KL_t(pi_theta || pi_cur)

and this module maps verl's arguments onto it (verl's ``PolicyLossFn``: ``old_log_prob, log_prob,
advantages, response_mask, loss_agg_mode, config: ActorConfig, rollout_is_weights``):

==========================  =====================================================================
satseq                      verl
==========================  =====================================================================
``logp`` / ``cur_logp``     ``log_prob`` / ``old_log_prob`` (pi_cur = the stage's data policy)
``clip_low/clip_high``      ``config.clip_ratio_low/high`` (else ``clip_ratio``); the recipe sets them to
                            ``sat_seq.epsilon``
``is_weight`` c_b           ``rollout_is_weights[B, T]`` reduced to its masked mean per sequence (the
                            K-agent trainer writes c_b on every token of the sequence); None = 1
``kl``                      satseq's ``kl_penalty(log_prob, old_log_prob, config.kl_loss_type)``
                            (verl's names: ``low_var_kl`` = k3, ``kl`` = k1, ``mse`` = k2, ``abs``)
``beta``                    ``config.policy_loss.ppo_kl_coef`` (the trainer sets it per agent: it grows
                            1.5x per backtrack)
``ratio``                   the loss name: ``sat_seq`` (exp of the mean log-ratio), ``sat_seq_token``,
                            ``sat_seq_product``
==========================  =====================================================================

Aggregation: satseq's loss is the mean over the sequences of the call. verl sums micro-batch losses and
expects each to be normalised by the *global* mini-batch (``config.global_batch_info``: ``dp_size``,
``global_batch_size``; ``verl.trainer.ppo.core_algos.agg_loss``); so, as ``agg_loss``'s
``seq-mean-token-mean`` does, the satseq mean is rescaled by ``n_seq(call) / global_batch_size * dp_size``
when a global batch size is given. Keep ``actor.use_kl_loss=false``: the beta KL term is inside this loss.
"""
from __future__ import annotations

from typing import Any, Optional

import torch

from satseq.algos.kl import kl_penalty
from satseq.methods.sat_seq.loss.seq_ratio_loss import seq_ratio_loss
from verl.trainer.ppo.core_algos import register_policy_loss

#: verl loss name -> satseq ratio form
LOSS_MODES = {"sat_seq": "sequence", "sat_seq_token": "token", "sat_seq_product": "product"}


def _cfg(config, key: str, default=None):
    if config is None:
        return default
    value = config.get(key, None) if hasattr(config, "get") else getattr(config, key, None)
    return default if value is None else value


def sequence_weight(rollout_is_weights: Optional[torch.Tensor], response_mask: torch.Tensor) -> Optional[torch.Tensor]:
    """Per-sequence weight ``[B]``: the masked mean of a per-token weight ``[B, T]`` (or None)."""
    if rollout_is_weights is None:
        return None
    m = response_mask.to(rollout_is_weights.dtype)
    return (rollout_is_weights * m).sum(-1) / m.sum(-1).clamp(min=1.0)


def sat_seq_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "seq-mean-token-mean",
    config: Optional[Any] = None,
    rollout_is_weights: Optional[torch.Tensor] = None,
    *,
    ratio: str = "sequence",
) -> tuple[torch.Tensor, dict[str, Any]]:
    """satseq's seq_ratio_loss on verl's arguments (module docstring)."""
    clip = _cfg(config, "clip_ratio", 0.2)
    clip_low, clip_high = _cfg(config, "clip_ratio_low", clip), _cfg(config, "clip_ratio_high", clip)
    policy_loss = _cfg(config, "policy_loss", None)
    beta = float(_cfg(policy_loss, "ppo_kl_coef", 0.0))
    kl = kl_penalty(log_prob, old_log_prob.detach(), _cfg(config, "kl_loss_type", "low_var_kl"))
    mask = response_mask.to(torch.bool)
    loss, m = seq_ratio_loss(log_prob, old_log_prob, advantages, mask, clip_low=float(clip_low),
                             clip_high=float(clip_high), agg_mode=loss_agg_mode,
                             is_weight=sequence_weight(rollout_is_weights, mask), kl=kl, beta=beta, ratio=ratio)
    info = dict(getattr(config, "global_batch_info", None) or {}) if config is not None else {}
    if info.get("global_batch_size") is not None:  # verl sums micro-batches: normalise by the global batch
        n_seq = (mask.sum(-1) > 0).sum().clamp(min=1)
        loss = loss * n_seq / info["global_batch_size"] * info.get("dp_size", 1)
    metrics = {"actor/pg_clipfrac": m["clipfrac"], "actor/ppo_kl": m["kl_mean"],
               "actor/sat_seq_ratio_mean": m["ratio_mean"], "actor/sat_seq_is_weight_mean": m["is_weight_mean"],
               "actor/sat_seq_beta": beta}
    return loss, metrics


def _register(name: str, ratio: str):
    def fn(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="seq-mean-token-mean", config=None,
           rollout_is_weights=None):
        return sat_seq_policy_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config,
                                   rollout_is_weights, ratio=ratio)

    fn.__name__ = fn.__qualname__ = f"compute_policy_loss_{name}"
    fn.__doc__ = f"SAT-Seq loss, ratio form {ratio!r} (satseq seq_ratio_loss; {__name__})."
    return register_policy_loss(name)(fn)


compute_policy_loss_sat_seq = _register("sat_seq", "sequence")
compute_policy_loss_sat_seq_token = _register("sat_seq_token", "token")
compute_policy_loss_sat_seq_product = _register("sat_seq_product", "product")
