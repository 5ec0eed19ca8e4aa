"""The ``grpo`` config section: GRPO, and the PPO settings PAG and MLMT-RL share."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from satseq.config.section import Section


class GRPOConfig(Section):
    group_size: int = Field(4, ge=1, description="responses sampled per prompt")
    epsilon_low: float = Field(0.2, ge=0.0, description="lower clip range of the ratio (1 - eps_low)")
    epsilon_high: float = Field(0.2, ge=0.0, description="upper clip range of the ratio (1 + eps_high)")
    kl_coef: float = Field(0.0, ge=0.0, description="KL-to-reference penalty coefficient (0 = none)")
    loss_agg_mode: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"] = Field(
        "seq-mean-token-mean", description="how token losses are aggregated into the batch loss")
    adv_estimator: str = Field("grpo", description="advantage estimator from the registry (satseq.algos: grpo, dr_grpo, ...)")
    policy_loss: str = Field("ppo", description="clipped policy-gradient loss from the registry (satseq.algos: ppo, gspo, ...)")
    ppo_epochs: int = Field(1, ge=1, description="passes over the rollouts per update")
    mini_batch_size: int = Field(64, ge=1, description="sequences per optimizer step")
    lr: float = Field(3e-5, gt=0.0, description="learning rate (AdamW)")
