"""Order in which SAT-Seq updates its agents each stage (spec, "Per stage" step 3).

Modes:

- ``fixed``:       the configured order every stage.
- ``random``:      a fresh uniform permutation per stage (as HAPPO), drawn from a generator
                   seeded by ``sha256(f"{seed}:{stage}")``: stateless, so a resumed run gets the
                   same order for the same stage.
- ``round_robin``: the configured order rotated to start at agent ``stage mod K``.
- ``greedy``:      largest mean |A| first (ties keep the configured order).
"""
from __future__ import annotations

import hashlib
import random
from typing import Mapping, Sequence

from satseq.errors import ConfigError

SCHEDULER_MODES = ("fixed", "random", "round_robin", "greedy")


class AgentScheduler:
    """``AgentScheduler(names, mode, seed).order(stage, mean_abs_adv=None) -> list[str]``."""

    def __init__(self, names: Sequence[str], mode: str = "fixed", seed: int = 0):
        if mode not in SCHEDULER_MODES:
            raise ConfigError(f"unknown agent scheduler mode '{mode}' (known: {', '.join(SCHEDULER_MODES)})")
        names = list(names)
        if not names:
            raise ConfigError("sat_seq.agents is empty: at least one agent is needed")
        if len(set(names)) != len(names):
            raise ConfigError(f"duplicate agent names in sat_seq.agents: {names}")
        self.names = names
        self.mode = mode
        self.seed = int(seed)

    def order(self, stage: int, mean_abs_adv: Mapping[str, float] | None = None) -> list[str]:
        """The update order for ``stage`` (``mean_abs_adv`` name -> mean |A| is needed by ``greedy``)."""
        names = self.names
        if self.mode == "fixed":
            return list(names)
        if self.mode == "round_robin":
            s = stage % len(names)
            return names[s:] + names[:s]
        if self.mode == "random":
            digest = hashlib.sha256(f"{self.seed}:{stage}".encode()).digest()
            rng = random.Random(int.from_bytes(digest[:8], "big"))
            out = list(names)
            rng.shuffle(out)
            return out
        if mean_abs_adv is None or any(n not in mean_abs_adv for n in names):
            missing = [n for n in names if mean_abs_adv is None or n not in mean_abs_adv]
            raise ValueError(f"greedy scheduling needs mean |A| for every agent; missing {missing}")
        return sorted(names, key=lambda n: -float(mean_abs_adv[n]))  # stable: ties keep config order
