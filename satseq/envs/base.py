"""The :class:`Environment` contract: what an episode is, apart from how an algorithm learns from it.

An environment says what one episode is: its **roles** and their turn order, what each turn sees (its
workflow and prompt format), when the episode ends, its **reward** (per turn, or at the end) and its
held-out metrics, and, where it has one, its embedded task and warm start. An algorithm
(:class:`satseq.methods.base.Method`) says how episodes are credited and learned from. A run is an
environment × an algorithm (``env.name`` × ``method``)::

    env      = get_env(cfg.env.name or method.env)
    workflow = env.make_workflow(cfg, method.roles(cfg, pool.names), fmt, sampling)
    episodes = workflow.rollout(problems, pool, engine, group_size=method.group_size(cfg))
    rewards  = method.assign_rewards(cfg, episodes, ctx)    # default: env.assign_rewards (the env's reward)
    metrics  = env.rollout_metrics(cfg, episodes) + updater.update(stage, episodes)
             + env.held_out_metrics(cfg, rt, workflow, generator)   # every trainer.eval_every

An environment subclasses :class:`Environment`, sets its class attributes, overrides what differs
from the one-turn defaults and registers itself (:func:`satseq.registry.register_env`): one file,
in ``satseq/envs/<name>/env.py`` for a built-in one, anywhere else for a user's (a test file
defines one). Its own settings are a config section mounted at ``env.<key>``
(:attr:`Environment.config_section`). This module names no environment and no method.

The defaults are the one-turn ones: one role per agent, the ``single`` workflow's protocol (one
sampled answer per problem), correctness rewards (or ``reward.custom``), sampled held-out accuracy, the
two-operand embedded task and its warm start.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from satseq.records import Episode


class Environment:
    """What an episode is. Subclass, set ``name`` (what ``env.name=<name>`` selects), override what
    differs and register with :func:`satseq.registry.register_env`."""

    name: str = ""
    title: str = ""                        # a line for docs and listings
    workflow: str = "single"               # the registered workflow that plays its episodes (make_workflow)
    config_section: tuple = ()             # ("<key>", <Section class>[, description]): its settings, at env.<key>
    warm_start_stem: Optional[str] = None  # its own embedded warm start's directory stem (`satseq sft --task
                                           # <name>`); None: the base warm start (satseq.models.warm_start)
    task_aliases: tuple[str, ...] = ()     # other values of data.embedded_task that name its task (older
                                           # configs named a method: pag, mlmt)
    supports_custom_reward: bool = True    # reward.custom / reward.controller replace its reward
    max_turns: Optional[int] = None        # turns per episode when fixed (None: set by its settings)
    last_turn_outcome: bool = False        # its last turn's reward is the episode's outcome for every role, so
                                           # one policy credited by it (GRPO) may play roles credited apart

    # ------------------------------------------------------------------ config
    def config_defaults(self, cfg) -> dict[str, Any]:
        """Dotted config keys -> values set when the user leaves them unset (applied before the
        algorithm's own :meth:`~satseq.methods.base.Method.defaults`)."""
        return {}

    def check(self, cfg) -> None:
        """The environment's checks of its settings (one-line ConfigError naming the key)."""
        if cfg.env.max_turns is not None and self.max_turns is not None and cfg.env.max_turns != self.max_turns:
            from satseq.errors import ConfigError

            raise ConfigError(f"config key 'env.max_turns': env.name={self.name} has {self.max_turns} turns per "
                              f"episode, not {cfg.env.max_turns}")

    # ------------------------------------------------------------------ roles, turns, prompts
    def role_names(self, cfg) -> Optional[list[str]]:
        """The roles an episode has, in turn order; None: one role per agent, named after it."""
        return None

    def roles(self, cfg, agent_names: list[str]) -> dict[str, str]:
        """role -> pool agent when each agent plays its own role (an algorithm with one policy for every
        role maps them otherwise: :meth:`~satseq.methods.base.Method.roles`)."""
        names = self.role_names(cfg)
        if names is None:
            return {n: n for n in agent_names}
        if len(agent_names) == 1:
            return {r: agent_names[0] for r in names}
        if len(agent_names) != len(names):
            from satseq.errors import ConfigError

            raise ConfigError(f"config key 'env.name': env {self.name} has roles {names}; {len(agent_names)} "
                              f"agents ({agent_names}) cannot play them one each")
        return dict(zip(names, agent_names))

    def workflow_options(self, cfg) -> dict:
        """Keyword options of its workflow (turn limits, ...)."""
        return {}

    def make_workflow(self, cfg, roles: dict[str, str], prompt_format, sampling, options: Optional[dict] = None):
        """The workflow that plays its episodes: ``roles`` (role -> agent), the prompt format, the sampling
        and the workflow's options (default :meth:`workflow_options` of ``cfg``; ``satseq eval`` passes a
        saved run's)."""
        from satseq.workflows.base import make_workflow

        options = self.workflow_options(cfg) if options is None else options
        return make_workflow(self.workflow, roles, prompt_format, sampling, **options)

    def prompt_format(self, kind: str, tokenizer, cfg):
        """The prompt format for a model of format ``kind`` ("embedded" or "chat")."""
        from satseq.workflows.prompts import make_format

        return make_format(kind, tokenizer, chat_template=cfg.model.chat_template, template=cfg.data.prompt_template)

    # ------------------------------------------------------------------ the embedded default
    def embedded_task(self, seed: int = 0):
        """The synthetic task ``data.train=embedded`` / ``data.eval=embedded`` means in this environment."""
        from satseq.data.arithmetic import ArithmeticTask

        return ArithmeticTask(seed=seed)

    def ensure_warm_start(self, output_dir, **kw) -> Path:
        """The embedded warm start ``model.path=embedded`` means in this environment (built on first use)."""
        from satseq.models.warm_start import ensure_warm_start

        return ensure_warm_start(output_dir, **kw)

    # ------------------------------------------------------------------ the reward
    def assign_rewards(self, cfg, episodes: list[Episode], ctx) -> dict:
        """The environment's reward: set every turn's ``reward`` (and ``correct``); returns reward
        metrics to log. ``ctx.custom`` (``reward.custom`` / ``reward.controller``) replaces correctness.
        Default: each turn's answer graded against the reference (:mod:`satseq.rewards.turn_rewards`)."""
        from satseq.rewards.turn_rewards import assign_outcome_rewards

        assign_outcome_rewards(episodes, custom=ctx.custom)
        return {}

    def reward_bound(self, cfg, n_agents: int, custom) -> Optional[float]:
        """The largest episode reward (sum over turns) its reward can give, when known; None otherwise."""
        return None

    # ------------------------------------------------------------------ metrics and evaluation
    def metric_roles(self, cfg, rt, workflow) -> list[str]:
        """Roles whose training accuracy and response length are logged as ``<role>/accuracy``."""
        return list(workflow.agents)

    def rollout_metrics(self, cfg, episodes: list[Episode]) -> dict:
        """Metrics of a stage's episodes beyond the loop's own (``rollout/...``, per role)."""
        return {}

    def held_out_metrics(self, cfg, rt, workflow, generator) -> dict:
        """Sampled accuracy on ``data.eval``, one episode per problem (``eval/...`` metrics)."""
        from satseq.eval.rollout_eval import evaluate_single

        agent = rt.pool.names[0]
        r = evaluate_single(rt.pool, agent, rt.fmt, rt.engine, rt.eval, sampling=rt.sampling, generator=generator)
        return {f"eval/{agent}/accuracy": r["acc"]}

    def run_info(self, cfg, workflow) -> dict:
        """Extra keys of ``run_info.json`` (read back by the evaluator)."""
        return {}

    def grade(self, episodes: list[Episode]) -> None:
        """Mark correctness for ``satseq eval``."""
        from satseq.rewards.turn_rewards import grade_episodes

        grade_episodes(episodes)

    def eval_roles(self, info: dict, agents: list[str], cfg) -> Optional[dict[str, str]]:
        """role -> agent when ``satseq eval`` runs a saved run (``info``: its run_info.json; ``cfg``: its
        train_config.yaml), where the run recorded them; None: its algorithm's
        (:meth:`~satseq.methods.base.Method.roles`)."""
        return None

    def prediction_answers(self, episodes: list[Episode]):
        """``satseq eval`` in this environment: ``(answers, correct)``, one per episode of a problem,
        whose majority vote is the prediction; None: the evaluator's default (the team's prediction of
        a run, the first turn's answer of a single model)."""
        return None

    def prediction_fields(self, episodes: list[Episode]) -> Optional[dict]:
        """``satseq eval`` in this environment: the extra fields of a problem's prediction line
        (per-turn answers, verdicts...); None: the evaluator's default."""
        return None

