"""The per-turn reward hook: which function replaces correctness for a run, if any.

Three equivalent ways, in this order of precedence:

- ``reward_fn`` passed to :func:`satseq.train` (the Python API);
- ``reward.controller: "module:Class"``: a subclass of the seed's
  :class:`~satseq.methods.sat_seq.real_controller.RealController` (any class with
  ``_compute_reward(prompt, response, answer)``); it is built with ``Class.from_config(cfg)``
  when it has that classmethod, else ``Class()``, and its ``_compute_reward`` is the reward;
- ``reward.custom: "module:function"``: ``function(prompt, response, answer) -> float``.

Both config keys and the Python argument give the same training rewards for the same function.
"""
from __future__ import annotations

from typing import Callable, Optional

from satseq.errors import ConfigError
from satseq.rewards.grade import import_object, load_custom_reward

RewardFn = Callable[[str, str, str], float]


def resolve_custom_reward(cfg, reward_fn: Optional[RewardFn] = None) -> Optional[RewardFn]:
    if reward_fn is not None:
        return reward_fn
    if cfg.reward.controller:
        cls = import_object(cfg.reward.controller, "reward.controller", "module:Class")
        if not hasattr(cls, "_compute_reward"):
            raise ConfigError(f"reward.controller: {cfg.reward.controller!r} has no _compute_reward(prompt, response, answer)")
        try:
            obj = cls.from_config(cfg) if hasattr(cls, "from_config") else cls()
        except ConfigError:
            raise
        except Exception as e:  # noqa: BLE001 — user code, reported in one line
            raise ConfigError(f"reward.controller: cannot build {cfg.reward.controller!r} ({type(e).__name__}: {e})") from None
        return obj._compute_reward
    if cfg.reward.custom:
        return load_custom_reward(cfg.reward.custom)
    return None
