"""The ``grpo`` config section: GRPO, and the PPO settings PAG and MLMT-RL share."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from satseq.config.section import Section


class GRPOConfig(Section):
    """``grpo``: GRPO and the single-policy baselines selected by ``grpo.loss`` (dr_grpo, dapo, gspo, rloo, reinforce_pp)."""

    group_size: int = Field(4, ge=1, description="responses sampled per prompt")
    epsilon_low: float = Field(0.2, ge=0.0, description="lower clip range of the ratio (1 - eps_low)")
    epsilon_high: float = Field(0.2, ge=0.0, description="upper clip range of the ratio (1 + eps_high)")
    kl_coef: float = Field(0.0, ge=0.0, description="KL-to-reference penalty coefficient (0 = none)")
    loss_agg_mode: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"] = Field(
        "seq-mean-token-mean", description="how token losses are aggregated into the batch loss")
    loss: str = Field("grpo", description=(
        "method=grpo baseline preset, filling the grpo keys left unset (satseq/methods/grpo/presets.py): "
        "grpo = adv grpo, ppo, seq-mean-token-mean, eps 0.2/0.2; "
        "dr_grpo = adv dr_grpo, ppo, seq-mean-token-sum-norm, eps 0.2/0.2; "
        "dapo = adv grpo, ppo, token-mean, eps 0.2/0.28, dynamic_sampling, overlong_buffer = max_new_tokens // 5; "
        "gspo = adv grpo, gspo, seq-mean-token-mean, eps 3e-4/4e-4; "
        "rloo = adv rloo, ppo, seq-mean-token-sum, eps 0.2/0.2; "
        "reinforce_pp = adv reinforce_pp, ppo, token-mean, eps 0.2/0.2"))
    adv_estimator: str = Field("grpo", description="advantage estimator from the registry (satseq.algos: grpo, dr_grpo, rloo, reinforce_pp, ...)")
    policy_loss: str = Field("ppo", description="clipped policy-gradient loss from the registry (satseq.algos: ppo, gspo, ...)")
    dynamic_sampling: bool = Field(False, description="method=grpo: DAPO dynamic sampling, drop groups whose task rewards are all equal and roll out more prompts until trainer.train_batch_size groups are informative")
    max_resample_rounds: int = Field(3, ge=0, description="dynamic sampling: most extra rollout rounds per stage (each of trainer.train_batch_size prompts); then train on the informative groups found")
    overlong_buffer: int = Field(0, ge=0, description="method=grpo: DAPO soft overlong penalty buffer L_cache in tokens (0 = off): a response longer than rollout.max_new_tokens - L_cache gets -(excess / L_cache), at most -1, added to its reward")
    ppo_epochs: int = Field(1, ge=1, description="passes over the rollouts per update")
    mini_batch_size: int = Field(64, ge=1, description="sequences per optimizer step")
    lr: float = Field(3e-5, gt=0.0, description="learning rate (AdamW)")
