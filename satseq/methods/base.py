"""The :class:`Method` contract: an algorithm, i.e. how episodes are credited and learned from, with
the defaults a single-policy method uses. What an episode is (its roles, turns, prompts, reward,
held-out metrics, embedded task and warm start) is the environment's
(:class:`satseq.envs.base.Environment`); a run is an environment × an algorithm.

A method subclasses :class:`Method`, sets its class attributes and overrides what differs, then
registers itself (:func:`satseq.registry.register_method`). One training stage, as the loop
(:mod:`satseq.loop`) runs it, in the method's words::

    episodes = workflow.rollout(problems, pool, engine, group_size=method.group_size(cfg))
    metrics  = method.assign_rewards(cfg, episodes, rewards_ctx)     # default: the environment's reward
             + env.rollout_metrics(cfg, episodes)
             + updater.update(stage, episodes)                       # method.build_updater(...)
             + env.held_out_metrics(cfg, rt, workflow, generator)     # every trainer.eval_every

A method keeps only the update's hooks: the agents it trains (:meth:`Method.agents`) and the role each
plays (:meth:`Method.roles`), the group size, its config section, defaults and checks, the credit it
adds to the environment's reward (:meth:`Method.assign_rewards`), the stage's collection
(:meth:`Method.collect`), work before the first stage (:meth:`Method.prepare`), the updater (local,
and in Ray actors), warnings after a stage, its CLI commands and its dashboard. Its default environment
is :attr:`Method.env`; :attr:`Method.envs` lists the environments it can train.

The defaults are the single-policy ones: one agent ``policy`` from ``model.path`` playing every role;
the group size and the dashboard layout are those of the method that stands for the ``single``
environment (:func:`satseq.registry.method_for_env`). This module names no method.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch

from satseq.records import Episode

POLICY = "policy"


@dataclass
class AgentSpec:
    """The pool agents a method trains: names, starting models (None = ``model.path``), the config
    keys that set those paths (for error messages), and whether LoRA adapters are required."""

    names: list[str]
    paths: list[Optional[str]]
    path_keys: Optional[list[str]] = None
    force_lora: bool = False


@dataclass
class RewardContext:
    """What reward assignment may use besides the episodes: the custom per-turn reward
    ``(prompt, response, answer) -> float`` (``reward.custom`` / ``reward.controller``), the
    updater (for methods whose rewards need the policy, e.g. MLMT's coach reward)."""

    custom: Optional[Callable[[str, str, str], float]] = None
    updater: Any = None
    extra: dict = field(default_factory=dict)


class Method:
    """A training algorithm: subclass, set ``name`` (what ``method=<name>`` selects) and override what
    differs from the single-policy defaults; register with :func:`satseq.registry.register_method`.
    ``build_updater`` is the one hook without a default."""

    name: str = ""
    title: str = ""                        # the dashboard's title
    env: str = "single"                    # the environment it trains in when env.name is unset
    envs: Optional[tuple[str, ...]] = None  # the environments it can train (None: every registered one)
    owns_env: bool = False                 # a single model evaluated in `env` stands for this method
    metric_markers: tuple[str, ...] = ()   # regexes of metric names only it logs (plot a run without run_info.json)
    config_defaults: dict[str, Any] = {}   # dotted config keys set when the user leaves them unset
    update_sections: tuple[str, ...] = ()  # config sections (dotted prefixes) holding its update's settings
                                           # (lr, epochs, clipping); () = the section named after it. A
                                           # `satseq compare` sweep over a key under a method's section
                                           # applies only to the runs whose method lists it (docs/compare.md)
    config_section: tuple = ()             # ("<key>", <Section class>[, description]): its own config section,
                                           # mounted on the config as `<key>` (satseq.config.schema.train_config_model)
    exclusive_keys: dict[str, Any] = {}    # dotted keys of its section only it (and its subclasses) reads ->
                                           # their "off" value; another method with one set is a ConfigError
    moved_keys: dict[str, str] = {}        # dotted keys that left its section -> where they are now: setting
                                           # one is a one-line ConfigError naming the new key; a run's saved
                                           # train_config.yaml written before is read with them moved
    is_default: bool = False               # `method` defaults to it (read from the class itself, not inherited)
    metric_prefixes: tuple[str, ...] = ()  # heads of metric names `<head>/...` it logs that are not agents
    supports_custom_reward: bool = True    # reward.custom / reward.controller may replace the environment's reward
    ray_updater: Optional[str] = None      # trainer.backend=ray: "per_agent" (SAT-Seq's step in each agent's
                                           # actor), "whole" (a one-agent updater in its actor), None: local only

    # ------------------------------------------------------------------ config
    @property
    def default_run_name(self) -> str:
        return self.name

    @property
    def sections(self) -> tuple[str, ...]:
        """:attr:`update_sections`, or the section named after the method."""
        return self.update_sections or (self.name,)

    def defaults(self, cfg) -> dict[str, Any]:
        """Dotted config keys -> values set when the user leaves them unset (may depend on ``cfg``,
        e.g. GRPO's baseline preset ``grpo.loss``); default :attr:`config_defaults`."""
        return self.config_defaults

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "validate" in vars(cls):
            raise TypeError(f"{cls.__qualname__}: override check(cfg), not validate(cfg) (validate runs the checks "
                            "every method runs, then check)")

    def validate(self, cfg) -> None:
        """Check the config when it loads (one-line ConfigError naming the key). Every method runs the
        same base checks: each registered section's own checks (:meth:`check_section` of the method
        declaring it), no key of another method's :attr:`exclusive_keys` set, an environment it can
        train (:attr:`envs`) and that environment's checks; then the method's :meth:`check`. Not overridden (a subclass that defines ``validate`` is refused)."""
        from satseq.errors import ConfigError
        from satseq.registry import METHODS, discover

        discover()
        owners = list(METHODS.values())
        for m in owners:
            if "config_section" in vars(type(m)):
                m.check_section(cfg)
        for m in owners:
            if "exclusive_keys" not in vars(type(m)) or isinstance(self, type(m)):
                continue
            for key, off in m.exclusive_keys.items():
                node = cfg
                for part in key.split("."):
                    node = getattr(node, part)
                if node != off:
                    raise ConfigError(f"config key '{key}': only method={m.name} reads it (method={cfg.method})")
        env = self.environment(cfg)
        if not self.trains(env):
            what = ", ".join(self.envs) if self.envs is not None else "environments whose roles it can map"
            raise ConfigError(f"config key 'env.name': method={self.name} trains in {what}, not {env.name}")
        env.check(cfg)
        self.check(cfg)

    def check_section(self, cfg) -> None:
        """Checks of this method's own section (:attr:`config_section`) that hold whichever method
        runs (e.g. registered names); run by every method's :meth:`validate`."""

    def check(self, cfg) -> None:
        """The method's own checks of its settings, after the base checks of :meth:`validate`."""

    # ------------------------------------------------------------------ agents and environment
    def environment(self, cfg):
        """The environment a run of this method trains in: ``env.name``, else :attr:`env`."""
        from satseq.registry import get_env

        return get_env(cfg.env.name or self.env)

    def trains(self, env) -> bool:
        """Whether it can train in environment ``env`` (default: :attr:`envs` names it, or is None)."""
        return self.envs is None or env.name in self.envs

    def agents(self, cfg) -> AgentSpec:
        return AgentSpec([POLICY], [None])

    def roles(self, cfg, agent_names: list[str]) -> dict[str, str]:
        """role -> pool agent: each agent plays its own role, or one agent plays them all
        (:meth:`satseq.envs.base.Environment.roles`)."""
        return self.environment(cfg).roles(cfg, agent_names)

    def group_size(self, cfg) -> int:
        """Responses per prompt; default: the group size of the method that stands for ``single``."""
        return _single_env_method(self, "group_size").group_size(cfg)

    # ------------------------------------------------------------------ training
    def prepare(self, cfg, rt, custom, console) -> dict:
        """Work before the first stage (A*-PO's stage 1); returns objects for :meth:`build_updater`."""
        return {}

    def build_updater(self, cfg, rt, generator: torch.Generator, prepared: dict):
        """The run's updater (:class:`satseq.update.loop.Updater`). A block-coordinate updater runs its
        per-agent steps through ``rt.agent_steps`` when the strategy sets it (``trainer.backend=ray``:
        in the actors hosting the agents; None: in this process)."""
        raise NotImplementedError(f"method {self.name!r} does not define build_updater")

    def build_agent_updater(self, cfg, rt, generator: torch.Generator):
        """``ray_updater = "per_agent"``: the updater a Ray actor builds for the agents of ``rt.pool``
        it hosts, whose public ``update_agent(name, batch, weights)`` (:class:`satseq.update.loop.AgentSteps`)
        the driver's updater calls."""
        raise NotImplementedError(f"method {self.name!r} does not define build_agent_updater")

    def collect(self, cfg, draw: Callable[[int], tuple[list[Episode], dict]], batch_size: int
                ) -> tuple[list[Episode], dict]:
        """The stage's rewarded episodes and reward metrics; ``draw(n)`` samples ``n`` more prompts,
        rolls them out and assigns rewards (:meth:`assign_rewards`). Default: one draw of
        ``batch_size`` (GRPO overrides it for DAPO's dynamic sampling)."""
        return draw(batch_size)

    def assign_rewards(self, cfg, episodes: list[Episode], ctx: RewardContext) -> dict:
        """Set every turn's ``reward`` (and ``correct``); returns reward metrics to log. Default: the
        environment's reward (:meth:`satseq.envs.base.Environment.assign_rewards`); an algorithm adds its
        own shaping on top (GRPO's overlong penalty) or its own credit (MLMT's coach reward)."""
        return self.environment(cfg).assign_rewards(cfg, episodes, ctx) or {}

    def after_log(self, cfg, metrics: dict, state: dict, console) -> None:
        """Called after each stage's metrics are logged (warnings); ``state`` persists over stages."""

    # ------------------------------------------------------------------ commands and plots
    def cli_commands(self) -> dict:
        """Extra ``satseq`` subcommands the method brings: name -> typer command function."""
        return {}

    def dashboard(self, axes, rows, agents, run_dir) -> None:
        """Draw the six dashboard panels (``satseq plot``); default: the layout of the method that stands
        for the ``single`` environment."""
        _single_env_method(self, "dashboard").dashboard(axes, rows, agents, run_dir)


class RelaySeats:
    """What the relay's multi-agent algorithms share (SAT-Seq and the simultaneous update; mixed in before
    :class:`Method`): the agents are ``sat_seq.agents``, one per seat, and outside the relay one per role of
    an environment whose roles are credited apart (a game: :func:`satseq.update.turn_credit.trains_roles`),
    named after the roles when left unset; the group size and the loss are the ``sat_seq`` section's."""

    def check_seats(self, cfg) -> None:
        from satseq.algos import check_name

        check_name("sat_seq.policy_loss", cfg.sat_seq.policy_loss, kind="clipped_pg")
        env = self.environment(cfg)
        if env.name not in self.envs:
            from satseq.update.turn_credit import check_one_each

            check_one_each(env, cfg, [a.name for a in cfg.sat_seq.agents], self.name)

    def trains(self, env) -> bool:
        """The relay, and every environment whose roles are players credited per role, its agents seated one
        each (:meth:`check_seats`)."""
        from satseq.update.turn_credit import trains_roles

        return env.name in self.envs or trains_roles(env)

    def defaults(self, cfg) -> dict:
        """Outside the relay, ``sat_seq.agents`` left unset is one agent per role, named after it."""
        env = self.environment(cfg)
        if env.name in self.envs or not self.trains(env):
            return super().defaults(cfg)
        from satseq.update.turn_credit import role_agents

        return {**super().defaults(cfg), "sat_seq.agents": role_agents(env, cfg)}

    def agents(self, cfg) -> AgentSpec:
        agents = cfg.sat_seq.agents
        return AgentSpec([a.name for a in agents], [a.path for a in agents],
                         [f"sat_seq.agents[{i}].path" for i in range(len(agents))])

    def group_size(self, cfg) -> int:
        return cfg.sat_seq.group_size


def _single_env_method(method: Method, hook: str) -> Method:
    """The registered method that stands for the ``single`` environment, whose ``hook`` is the default one."""
    from satseq.registry import method_for_env

    owner = method_for_env("single")
    if owner is None or getattr(type(owner), hook) is getattr(Method, hook):
        raise NotImplementedError(f"method {method.name!r} defines no {hook} (and no registered method standing "
                                  "for the single environment does)")
    return owner
