"""The ``simultaneous`` config section: the one setting of the simultaneous update that SAT-Seq's
``sat_seq`` section does not hold."""
from __future__ import annotations

from pydantic import Field

from satseq.config.section import Section


class SimultaneousConfig(Section):
    """``simultaneous``: the simultaneous update's trust region (method=simultaneous only)."""

    trust_region: bool = Field(False, description="apply SAT-Seq's quantile-KL check with its step shrink (algorithm.kl_ctrl, sat_seq.max_backtracks, sat_seq.backtrack_alpha, the proposal's beta penalty algorithm.kl_ctrl.kl_coef) to every agent's step; the agents are still updated at once from the same batch, with no IS factor and no order (the trust region without the block-coordinate order)")
