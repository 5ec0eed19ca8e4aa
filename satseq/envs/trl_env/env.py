"""``env.name=trl_env``: an environment class written for TRL's ``GRPOTrainer(environment_factory=...)``,
run unchanged (``env.trl_env.factory=module:Class``).

TRL's contract, as its trainer reads it: the class (or factory) makes one instance per rollout; ``reset(**row)``
starts it for a dataset row and returns None or a text appended to the last user message; every other
public method is a tool the model may call (typed, with a Google-style docstring: its schema comes from
``transformers.utils.get_json_schema``); an optional ``get_reward()`` returns the rollout's reward from the
instance's state, and then owns the reward. Here each episode makes its instance, calls ``reset`` with
the problem's row (``prompt``: the problem text, ``answer``, and the problem's ``meta`` fields), and plays
the :mod:`tool_use <satseq.envs.tool_use.env>` protocol with the instance's methods as its tools: a call
runs the bound method, its return value (text, or JSON) is the tool message. The reward is
``get_reward()`` when the class defines it, else the final answer graded against the problem's
reference. A method's exception is a tool message; the episode goes on.
"""
from __future__ import annotations

import inspect
from typing import Optional

from pydantic import Field

from satseq.config.section import Section
from satseq.envs.base import Environment
from satseq.envs.common import load_dotted
from satseq.envs.tool_use.env import ToolUse
from satseq.errors import ConfigError
from satseq.registry import register_env


class TRLEnvConfig(Section):
    """``env.trl_env``: the environment class and how its tool calls are read."""

    factory: Optional[str] = Field(None, description='"module:Class" (or a module-level factory function): the TRL-style environment; one instance per episode')
    parser: str = Field("auto", min_length=1, description="how tool calls are read (as env.tool_use.parser: hermes, python_block, auto)")
    max_tool_calls: int = Field(8, ge=0, description="tool calls an episode may make; past it a call is answered 'error: tool budget spent'")
    system_prompt: Optional[str] = Field(None, description="the system message (None: how to call the tools and how to answer)")


def public_methods(instance) -> list:
    """The instance's tools, as TRL lists them: the class's public functions but ``reset`` and ``get_reward``."""
    return [getattr(instance, name) for name, _ in inspect.getmembers(type(instance), predicate=inspect.isfunction)
            if name not in ("reset", "get_reward") and not name.startswith("_")]


@register_env
class TRLEnv(ToolUse):
    name = "trl_env"
    title = "a TRL environment_factory class: reset(**row), its public methods as tools, get_reward()"
    config_section = ("trl_env", TRLEnvConfig, "an environment written for TRL's environment_factory")
    # not the tool environment's embedded task, warm start and prompt layout: the base ones, the problem as is
    warm_start_stem = None
    embedded_layout = None
    embedded_task = Environment.embedded_task
    ensure_warm_start = Environment.ensure_warm_start

    def section(self, cfg) -> TRLEnvConfig:
        return cfg.env.trl_env

    def factory(self, cfg):
        spec = self.section(cfg).factory
        if not spec:
            raise ConfigError("config key 'env.trl_env.factory': env.name=trl_env needs the environment class "
                              "(module:Class)")
        made = load_dotted(spec, "env.trl_env.factory")
        if not callable(made):
            raise ConfigError(f"config key 'env.trl_env.factory': {spec!r} is not module:Class")
        return made

    def check(self, cfg) -> None:
        from satseq.tools.parsers import get_tool_parser

        s = self.section(cfg)
        if s.parser != "auto":
            get_tool_parser(s.parser, key="env.trl_env.parser")
        probe = self.factory(cfg)()
        if not callable(getattr(probe, "reset", None)):
            raise ConfigError(f"config key 'env.trl_env.factory': {s.factory} has no reset method (TRL's "
                              "environment_factory needs one)")

    def needs_sandbox(self, cfg) -> bool:
        return False

    def tools(self, cfg) -> list:
        from satseq.tools.registry import tools_by_name

        return list(tools_by_name(public_methods(self.factory(cfg)())).values())

    def episode_tools(self, cfg, problem) -> dict:
        from satseq.tools.registry import tools_by_name

        instance = self.factory(cfg)()
        row = {"prompt": problem.problem, "answer": problem.answer, **dict(problem.meta or {})}
        observation = instance.reset(**row)
        reward = getattr(instance, "get_reward", None)
        return {"tools": tools_by_name(public_methods(instance)),
                "observation": observation if isinstance(observation, str) else None,
                "reward": reward if callable(reward) else None}
