"""The ``grpo`` config section: GRPO's own settings (its update's, shared with PAG and MLMT-RL, are
the common ``ppo`` section's, :class:`satseq.config.schema.PPOConfig`)."""
from __future__ import annotations

from pydantic import Field

from satseq.config.section import Section


class GRPOConfig(Section):
    """``grpo``: GRPO and the single-policy baselines selected by ``grpo.loss`` (dr_grpo, dapo, gspo, rloo,
    reinforce_pp): the group size, advantage estimator and DAPO's rollout-side parts. The update's
    settings (clip range, aggregation, KL, epochs, mini-batch, lr) are the common ``ppo`` section's."""

    group_size: int = Field(4, ge=1, description="responses sampled per prompt (also PAG's and MLMT-RL's, which sample as GRPO does)")
    loss: str = Field("grpo", description=(
        "method=grpo baseline preset, filling the keys left unset among grpo.adv_estimator, grpo.dynamic_sampling, "
        "grpo.overlong_buffer, ppo.policy_loss, ppo.loss_agg_mode, ppo.epsilon_low and ppo.epsilon_high "
        "(satseq/methods/grpo/presets.py): "
        "grpo = adv grpo, ppo, seq-mean-token-mean, eps 0.2/0.2; "
        "dr_grpo = adv dr_grpo, ppo, seq-mean-token-sum-norm, eps 0.2/0.2; "
        "dapo = adv grpo, ppo, token-mean, eps 0.2/0.28, dynamic_sampling, overlong_buffer = max_new_tokens // 5; "
        "gspo = adv grpo, gspo, seq-mean-token-mean, eps 3e-4/4e-4; "
        "rloo = adv rloo, ppo, seq-mean-token-sum, eps 0.2/0.2; "
        "reinforce_pp = adv reinforce_pp, ppo, token-mean, eps 0.2/0.2"))
    adv_estimator: str = Field("grpo", description="advantage estimator from the registry (satseq.algos: grpo, dr_grpo, rloo, reinforce_pp, ...)")
    dynamic_sampling: bool = Field(False, description="method=grpo: DAPO dynamic sampling, drop groups whose task rewards are all equal and roll out more prompts until trainer.train_batch_size groups are informative")
    max_resample_rounds: int = Field(3, ge=0, description="dynamic sampling: most extra rollout rounds per stage (each of trainer.train_batch_size prompts); then train on the informative groups found")
    overlong_buffer: int = Field(0, ge=0, description="method=grpo: DAPO soft overlong penalty buffer L_cache in tokens (0 = off): a response longer than rollout.max_new_tokens - L_cache gets -(excess / L_cache), at most -1, added to its reward")
