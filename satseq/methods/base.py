"""The :class:`Method` contract: what the loop, the CLI, ``satseq eval`` and ``satseq plot`` need
from a training method, with the defaults a single-policy, single-turn method uses.

A method subclasses :class:`Method`, sets its class attributes and overrides what differs, then
registers itself (:func:`satseq.registry.register_method`). One training stage, as the loop
(:mod:`satseq.loop`) runs it, in the method's words::

    episodes = workflow.rollout(problems, pool, engine, group_size=method.group_size(cfg))
    metrics  = method.assign_rewards(cfg, episodes, rewards_ctx)     # per-turn rewards
             + method.rollout_metrics(cfg, episodes)
             + updater.update(stage, episodes)                       # method.build_updater(...)
             + method.held_out_metrics(cfg, rt, workflow, generator)  # every trainer.eval_every

The defaults are the single-policy, single-turn ones: one agent ``policy`` from ``model.path``, the
``single`` workflow, correctness rewards (or ``reward.custom``), the two-operand embedded task and
its warm start; the group size and the dashboard layout are those of the method that owns the
``single`` workflow (:func:`satseq.registry.method_for_workflow`). This module names no method.

A method owns its config section (:attr:`Method.config_section`, mounted on the config by
:func:`satseq.config.schema.train_config_model`), its warm start (:attr:`Method.warm_start_stem`,
:meth:`Method.ensure_warm_start`), its dashboard (:meth:`Method.dashboard`, :attr:`Method.metric_prefixes`)
and its prediction fields (:meth:`Method.prediction_answers`, :meth:`Method.prediction_fields`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
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
    """A training method: subclass, set ``name`` (what ``method=<name>`` selects) and override what
    differs from the single-policy, single-turn defaults; register with
    :func:`satseq.registry.register_method`. ``build_updater`` is the one hook without a default."""

    name: str = ""
    title: str = ""                        # the dashboard's title
    workflow: str = "single"               # registered workflow it trains (and evaluates) with
    owns_workflow: bool = False            # a single model evaluated in `workflow` stands for this method
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
    warm_start_stem: Optional[str] = None  # its own embedded warm start's directory stem (`satseq sft --task
                                           # <name>` builds it with ensure_warm_start); None: the base one
    metric_prefixes: tuple[str, ...] = ()  # heads of metric names `<head>/...` it logs that are not agents
    supports_custom_reward: bool = True    # reward.custom / reward.controller replace correctness
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

    def task_defaults(self, cfg) -> dict[str, Any]:
        """The keys the embedded task ``data.embedded_task`` names sets when the user leaves them unset
        (applied before :meth:`defaults`, which may override them)."""
        from satseq.models.task_owner import task_config_defaults

        return task_config_defaults(cfg.data.embedded_task)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "validate" in vars(cls):
            raise TypeError(f"{cls.__qualname__}: override check(cfg), not validate(cfg) (validate runs the checks "
                            "every method runs, then check)")

    def validate(self, cfg) -> None:
        """Check the config when it loads (one-line ConfigError naming the key). Every method runs the
        same base checks: each registered section's own checks (:meth:`check_section` of the method
        declaring it), and no key of another method's :attr:`exclusive_keys` set; then the method's
        :meth:`check`. Not overridden (a subclass that defines ``validate`` is refused)."""
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
        self.check(cfg)

    def check_section(self, cfg) -> None:
        """Checks of this method's own section (:attr:`config_section`) that hold whichever method
        runs (e.g. registered names); run by every method's :meth:`validate`."""

    def check(self, cfg) -> None:
        """The method's own checks of its settings, after the base checks of :meth:`validate`."""

    # ------------------------------------------------------------------ agents and workflow
    def agents(self, cfg) -> AgentSpec:
        return AgentSpec([POLICY], [None])

    def roles(self, cfg, agent_names: list[str]) -> dict[str, str]:
        """role -> pool agent, as the workflow needs it (default: each agent plays its own role)."""
        return {n: n for n in agent_names}

    def workflow_options(self, cfg) -> dict:
        return {}

    def group_size(self, cfg) -> int:
        """Responses per prompt; default: the group size of the method that owns the ``single`` workflow."""
        return _single_workflow_method(self, "group_size").group_size(cfg)

    def prompt_format(self, kind: str, tokenizer, cfg):
        """The prompt format for a model of format ``kind`` ("embedded" or "chat")."""
        from satseq.workflows.prompts import make_format

        return make_format(kind, tokenizer, chat_template=cfg.model.chat_template, template=cfg.data.prompt_template)

    def default_max_new_tokens(self, cfg) -> int:
        return cfg.rollout.max_new_tokens

    # ------------------------------------------------------------------ the embedded default
    def embedded_task(self, seed: int = 0):
        """The synthetic task ``data.train=embedded`` / ``data.eval=embedded`` means for this method."""
        from satseq.data.arithmetic import ArithmeticTask

        return ArithmeticTask(seed=seed)

    def ensure_warm_start(self, output_dir, **kw) -> Path:
        """The embedded warm start ``model.path=embedded`` means for this method (built on first use)."""
        from satseq.models.warm_start import ensure_warm_start

        return ensure_warm_start(output_dir, **kw)

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
        """Set every turn's ``reward`` (and ``correct``); returns reward metrics to log."""
        from satseq.rewards.turn_rewards import assign_outcome_rewards

        assign_outcome_rewards(episodes, custom=ctx.custom)
        return {}

    def metric_roles(self, cfg, rt, workflow) -> list[str]:
        """Roles whose training accuracy and response length are logged as ``<role>/accuracy``."""
        return list(workflow.agents)

    def rollout_metrics(self, cfg, episodes: list[Episode]) -> dict:
        return {}

    def held_out_metrics(self, cfg, rt, workflow, generator: torch.Generator) -> dict:
        """Sampled accuracy on ``data.eval``, one episode per problem (``eval/...`` metrics)."""
        from satseq.eval.rollout_eval import evaluate_single

        agent = rt.pool.names[0]
        r = evaluate_single(rt.pool, agent, rt.fmt, rt.engine, rt.eval, sampling=rt.sampling, generator=generator)
        return {f"eval/{agent}/accuracy": r["acc"]}

    def after_log(self, cfg, metrics: dict, state: dict, console) -> None:
        """Called after each stage's metrics are logged (warnings); ``state`` persists over stages."""

    def run_info(self, cfg, workflow) -> dict:
        """Extra keys of ``run_info.json`` (read back by the evaluator)."""
        return {}

    # ------------------------------------------------------------------ evaluation and plots
    def grade(self, episodes: list[Episode]) -> None:
        """Mark correctness for ``satseq eval``."""
        from satseq.rewards.turn_rewards import grade_episodes

        grade_episodes(episodes)

    def eval_roles(self, info: dict, agents: list[str], cfg) -> dict[str, str]:
        """role -> agent when ``satseq eval`` runs a saved run (``info`` = its run_info.json, ``cfg``
        its train_config.yaml): the roles it trained with."""
        return self.roles(cfg, agents)

    def eval_workflow(self, kind: str) -> str:
        """The workflow ``satseq eval`` runs a saved run of this method in (``kind``: run or single)."""
        return self.workflow

    def cli_commands(self) -> dict:
        """Extra ``satseq`` subcommands the method brings: name -> typer command function."""
        return {}

    def dashboard(self, axes, rows, agents, run_dir) -> None:
        """Draw the six dashboard panels (``satseq plot``); default: the layout of the method that owns
        the ``single`` workflow."""
        _single_workflow_method(self, "dashboard").dashboard(axes, rows, agents, run_dir)

    def prediction_answers(self, episodes: list[Episode]):
        """``satseq eval`` of this method's workflow: ``(answers, correct)``, one per episode of a
        problem, whose majority vote is the prediction; None: the evaluator's default (the team's
        prediction of a run, the first turn's answer of a single model)."""
        return None

    def prediction_fields(self, episodes: list[Episode]) -> Optional[dict]:
        """``satseq eval`` of this method's workflow: the extra fields of a problem's prediction line
        (per-turn answers, verdicts...); None: the evaluator's default."""
        return None


def _single_workflow_method(method: Method, hook: str) -> Method:
    """The registered method that owns the ``single`` workflow, whose ``hook`` is the default one."""
    from satseq.registry import method_for_workflow

    owner = method_for_workflow("single")
    if owner is None or getattr(type(owner), hook) is getattr(Method, hook):
        raise NotImplementedError(f"method {method.name!r} defines no {hook} (and no registered method owning the "
                                  "single workflow does)")
    return owner
