"""``env.name=gym_text``: a gymnasium environment whose observations and actions are text, run unchanged
(``env.gym_text.id``: a registered id, ``gymnasium.make``; or ``env.gym_text.factory=module:Class``).

An episode is one gymnasium episode played as a conversation, continued token for token::

    obs, info = env.reset(seed=s)          ->  user message obs
    the agent's response (text)            ->  env.step(response) -> obs, r, terminated, truncated, info
    not terminated / truncated             ->  user message obs, the next turn

The problems are seeds (``embedded``: training seeds 0, 1, ...; held-out seeds from
:data:`EVAL_SEED_BASE` on, so the two never meet). The reward: each step's ``r`` is recorded in its turn
(``info["env_reward"]``); the **return** (their sum) is the last turn's reward and earlier turns get 0,
so an outcome method (GRPO) credits the episode's return. ``env.max_turns`` (default 8) bounds the
episode as gymnasium's ``TimeLimit`` would (the stop is ``turn_limit``); an exception from ``step`` ends
the episode with a return of what was earned (stop ``error``, the exception in the episode's info).
"""
from __future__ import annotations

from typing import Optional

from pydantic import Field

from satseq.config.section import Section
from satseq.envs.base import Environment
from satseq.envs.common import EVAL_SEED_BASE, ObservationFormat, SeedTask, load_dotted
from satseq.errors import ConfigError
from satseq.records import Episode, Problem, Turn
from satseq.registry import register_env

DEFAULT_MAX_TURNS = 8


class GymTextConfig(Section):
    """``env.gym_text``: which gymnasium environment, and the system message."""

    id: Optional[str] = Field(None, description="a registered gymnasium id (gymnasium.make(id)); its observations and actions are text")
    factory: Optional[str] = Field(None, description='"module:Class" (or a factory function) making the gymnasium.Env, instead of id')
    kwargs: dict = Field(default_factory=dict, description="keyword arguments for gymnasium.make / the factory")
    system_prompt: Optional[str] = Field(None, description="a system message before the first observation (chat models)")


class GymFormat(ObservationFormat):
    """A conversation format for gymnasium episodes (the first prompt is the first observation)."""

    def __init__(self, conversation_format, system: Optional[str]):
        super().__init__(conversation_format, system, "gym_text")


class GymSession:
    def __init__(self, fmt: GymFormat, env, problem: Problem, role: str):
        from satseq.envs.conversation import Conversation

        self.env, self.role, self.stop = env, role, None
        obs, _ = env.reset(seed=int(problem.meta.get("seed", problem.problem_id)))
        self.conv = Conversation(fmt.conversation, fmt.messages(str(obs)))
        self.rewards: list[float] = []
        self.error: Optional[str] = None

    def next_turn(self):
        if self.stop is not None:
            return None
        ids = self.conv.prompt_ids()
        return self.role, ids, self.conv.prompt_text

    def observe(self, turn: Turn, gen) -> None:
        from satseq.envs.conversation import Message

        self.conv.record(gen)
        try:
            obs, reward, terminated, truncated, info = self.env.step(gen.text)
        except Exception as e:  # noqa: BLE001 - the environment refused the action: the episode ends
            self.error, self.stop = f"{type(e).__name__}: {e}", "error"
            turn.info["env_reward"] = 0.0
            return
        turn.info["env_reward"] = float(reward)
        self.rewards.append(float(reward))
        if terminated or truncated:
            self.stop = "terminated" if terminated else "truncated"
            return
        self.conv.add(Message("user", str(obs)))

    def finish(self, episode: Episode) -> None:
        episode.info["return"] = sum(self.rewards)
        if self.error:
            episode.info["error"] = self.error
        close = getattr(self.env, "close", None)
        if callable(close):
            close()


@register_env
class GymText(Environment):
    name = "gym_text"
    title = "a gymnasium environment with text observations and actions, one episode a conversation"
    config_section = ("gym_text", GymTextConfig, "a gymnasium text environment")

    def section(self, cfg) -> GymTextConfig:
        return cfg.env.gym_text

    def make_env(self, cfg):
        s = self.section(cfg)
        if bool(s.id) == bool(s.factory):
            raise ConfigError("config key 'env.gym_text.id': set exactly one of env.gym_text.id and env.gym_text.factory")
        if s.id:
            import gymnasium

            try:
                return gymnasium.make(s.id, **s.kwargs)
            except gymnasium.error.Error as e:
                raise ConfigError(f"config key 'env.gym_text.id': {e}") from None
        made = load_dotted(s.factory, "env.gym_text.factory")
        return made(**s.kwargs)

    def check(self, cfg) -> None:
        env = self.make_env(cfg)
        for attr in ("reset", "step"):
            if not callable(getattr(env, attr, None)):
                raise ConfigError(f"config key 'env.gym_text': the environment has no {attr} method")

    def embedded_task(self, seed: int = 0):
        return SeedTask(seed)

    def prompt_format(self, kind, tokenizer, cfg):
        from satseq.envs.conversation import conversation_format

        chat = kind != "embedded" and getattr(tokenizer, "chat_template", None) is not None \
            and cfg.model.chat_template != "never"
        return GymFormat(conversation_format(tokenizer, kind="chat" if chat else "plain"),
                         self.section(cfg).system_prompt if chat else None)

    def make_workflow(self, cfg, roles, prompt_format, sampling, options=None):
        from satseq.workflows.interactive import InteractiveWorkflow

        roles = {roles: roles} if isinstance(roles, str) else dict(roles)  # one model evaluated: its name
        role, = roles
        return InteractiveWorkflow(roles, prompt_format, sampling,
                                   start=lambda p: GymSession(prompt_format, self.make_env(cfg), p, role),
                                   max_turns=cfg.env.max_turns or DEFAULT_MAX_TURNS)

    def assign_rewards(self, cfg, episodes, ctx) -> dict:
        for ep in episodes:
            for t in ep.turns:
                t.reward, t.correct = 0.0, False
            if ep.turns:
                ep.turns[-1].reward = float(ep.info.get("return", 0.0))
            ep.prediction_correct = ep.info.get("return", 0.0) > 0
        return {}

    def rollout_metrics(self, cfg, episodes) -> dict:
        n = max(1, len(episodes))
        return {"gym/return": sum(ep.info.get("return", 0.0) for ep in episodes) / n,
                "gym/turns": sum(len(ep.turns) for ep in episodes) / n,
                "gym/terminated": sum(ep.info.get("stop") == "terminated" for ep in episodes) / n}

    def held_out_metrics(self, cfg, rt, workflow, generator) -> dict:
        episodes = workflow.rollout(rt.eval, rt.pool, rt.engine, group_size=1, generator=generator)
        self.assign_rewards(cfg, episodes, None)
        return {f"eval/{k}": v for k, v in self.rollout_metrics(cfg, episodes).items()}

    def grade(self, episodes) -> None:
        self.assign_rewards(None, episodes, None)

    def prediction_answers(self, episodes):
        return [str(ep.info.get("return", 0.0)) for ep in episodes], [bool(ep.prediction_correct) for ep in episodes]

    def prediction_fields(self, episodes) -> dict:
        return {"returns": [ep.info.get("return", 0.0) for ep in episodes],
                "stop": [ep.info.get("stop") for ep in episodes],
                "responses": [[t.text for t in ep.turns] for ep in episodes]}
