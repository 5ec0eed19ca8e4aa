"""The alternating schedule ``{coach: a, solver: b}`` (spec ``mlmt.md``).

In every cycle of ``a + b`` training steps the solver trains its ``b`` steps first, then the coach
its ``a`` steps; ``a = b = 1`` is the exception that trains both roles at every step (the seed's
``HLT_LLT_RR_1_1``). ``HLT_LLT_RR_1_15`` = coach 1, solver 15: 15 solver steps, then 1 coach
step, in every 16. Roles that are not trainable never train, whatever the schedule says.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AlternatingSchedule:
    coach: int = 1
    solver: int = 1
    coach_trainable: bool = True
    solver_trainable: bool = True

    def __post_init__(self):
        if self.coach < 1 or self.solver < 1:
            raise ValueError(f"schedule counts must be >= 1, got coach={self.coach}, solver={self.solver}")

    @property
    def cycle(self) -> int:
        return 1 if (self.coach, self.solver) == (1, 1) else self.coach + self.solver

    def roles_at(self, step: int) -> list[str]:
        """The roles that train at training step ``step`` (0-based)."""
        if (self.coach, self.solver) == (1, 1):
            roles = ["solver", "coach"]
        else:
            roles = ["solver"] if step % self.cycle < self.solver else ["coach"]
        allowed = {"coach": self.coach_trainable, "solver": self.solver_trainable}
        return [r for r in roles if allowed[r]]
