"""``env.name=single``: one agent, one turn, ``group_size`` samples per problem; the reward is the
answer's correctness (or ``reward.custom``). Every default of :class:`~satseq.envs.base.Environment`
is this environment's: GRPO and A*-PO train in it."""
from __future__ import annotations

from satseq.envs.base import Environment
from satseq.registry import register_env


@register_env
class Single(Environment):
    name = "single"
    title = "one agent answers once"
    workflow = "single"
    max_turns = 1
