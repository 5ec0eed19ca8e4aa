"""Baseline presets: ``grpo.loss=<name>`` sets a paper's settings in one override.

A preset fills the keys the user left unset, GRPO's own (``grpo.adv_estimator``,
``grpo.dynamic_sampling``, ``grpo.overlong_buffer``) and the update's (``ppo.policy_loss``,
``ppo.loss_agg_mode``, ``ppo.epsilon_low``, ``ppo.epsilon_high``) (the same "unset" rule as
:attr:`satseq.methods.base.Method.config_defaults`, applied by
:func:`satseq.config.loader.finalize`); a key set in YAML or by an override always wins, so
``grpo.loss=dapo ppo.epsilon_high=0.3`` is DAPO with another upper clip.

=============  ==============  ===========  ========================  ===========  ===============================
preset         adv_estimator   policy_loss  loss_agg_mode             eps low/high extras
=============  ==============  ===========  ========================  ===========  ===============================
grpo           grpo            ppo          seq-mean-token-mean       0.2 / 0.2
dr_grpo        dr_grpo         ppo          seq-mean-token-sum-norm   0.2 / 0.2
dapo           grpo            ppo          token-mean                0.2 / 0.28   dynamic_sampling, overlong_buffer
gspo           grpo            gspo         seq-mean-token-mean       3e-4 / 4e-4
rloo           rloo            ppo          seq-mean-token-sum        0.2 / 0.2
reinforce_pp   reinforce_pp    ppo          token-mean                0.2 / 0.2
=============  ==============  ===========  ========================  ===========  ===============================

- ``grpo``: DeepSeekMath (Shao et al. 2024, arXiv 2402.03300), the schema defaults.
- ``dr_grpo``: Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training: A Critical
  Perspective", arXiv 2503.20783): no std division in the advantage, no 1/|o_i| length
  normalisation: each sequence's token sum divided by the constant generation budget
  (``rollout.max_new_tokens``), averaged over the mini-batch.
- ``dapo``: DAPO (Yu et al. 2025, arXiv 2503.14476): clip-higher (0.2 / 0.28), token-level loss,
  dynamic sampling (``grpo.dynamic_sampling=true``) and soft overlong punishment with the paper's
  buffer fraction, ``grpo.overlong_buffer = rollout.max_new_tokens // 5`` (4096 of 20480 there).
- ``gspo``: GSPO (Zheng et al. 2025, "Group Sequence Policy Optimization", arXiv 2507.18071):
  sequence-level ratio, clip range 3e-4 / 4e-4 (the paper's), one term per sequence.
- ``rloo``: RLOO (Ahmadian et al. 2024, arXiv 2402.14740): leave-one-out baseline, the whole
  response one action (token log-probs summed per sequence, averaged over sequences).
- ``reinforce_pp``: REINFORCE++-baseline (Hu et al. 2025, arXiv 2501.03262): group-mean baseline,
  global batch normalisation, PPO clip, token-level loss.

``ppo.kl_coef`` is not part of any preset (default 0: no KL term, as Dr. GRPO and DAPO).
"""
from __future__ import annotations

from typing import Any, Callable

from satseq.errors import ConfigError

_PPO = {"ppo.policy_loss": "ppo", "ppo.epsilon_low": 0.2, "ppo.epsilon_high": 0.2}

# name -> function of the config giving {dotted key: value}
PRESETS: dict[str, Callable[[Any], dict[str, Any]]] = {
    "grpo": lambda cfg: {**_PPO, "grpo.adv_estimator": "grpo", "ppo.loss_agg_mode": "seq-mean-token-mean"},
    "dr_grpo": lambda cfg: {**_PPO, "grpo.adv_estimator": "dr_grpo", "ppo.loss_agg_mode": "seq-mean-token-sum-norm"},
    "dapo": lambda cfg: {**_PPO, "grpo.adv_estimator": "grpo", "ppo.loss_agg_mode": "token-mean", "ppo.epsilon_high": 0.28,
                         "grpo.dynamic_sampling": True, "grpo.overlong_buffer": cfg.rollout.max_new_tokens // 5},
    "gspo": lambda cfg: {"grpo.adv_estimator": "grpo", "ppo.policy_loss": "gspo", "ppo.loss_agg_mode": "seq-mean-token-mean",
                         "ppo.epsilon_low": 3e-4, "ppo.epsilon_high": 4e-4},
    "rloo": lambda cfg: {**_PPO, "grpo.adv_estimator": "rloo", "ppo.loss_agg_mode": "seq-mean-token-sum"},
    "reinforce_pp": lambda cfg: {**_PPO, "grpo.adv_estimator": "reinforce_pp", "ppo.loss_agg_mode": "token-mean"},
}


def preset_names() -> list[str]:
    return list(PRESETS)


def preset_settings(cfg) -> dict[str, Any]:
    """``{"<section>.<key>": value}`` for the preset ``cfg.grpo.loss``; one-line ConfigError if unknown."""
    name = cfg.grpo.loss
    fn = PRESETS.get(name)
    if fn is None:
        raise ConfigError(f"config key 'grpo.loss': unknown baseline preset '{name}' "
                          f"(known: {', '.join(PRESETS)})")
    return fn(cfg)
