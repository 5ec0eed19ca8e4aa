"""What several environments share: a ``module:object`` setting loaded with a one-line error, episode
seeds as problems (gymnasium, TextArena), a conversation format whose first prompt is an observation,
and held-out metrics from one rollout of the held-out problems."""
from __future__ import annotations

import importlib
from typing import Callable, Optional

from satseq.errors import ConfigError
from satseq.records import Problem

#: held-out episode seeds start here, so that training seeds (0, 1, ...) never meet them
EVAL_SEED_BASE = 1_000_000


def load_dotted(spec: str, key: str):
    """The object ``module:attr`` names (a class, a function); a one-line ConfigError naming ``key`` otherwise."""
    mod, _, attr = str(spec).partition(":")
    if not mod or not attr:
        raise ConfigError(f"config key '{key}': {spec!r} is not module:name")
    try:
        obj = importlib.import_module(mod)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError, ValueError) as e:
        raise ConfigError(f"config key '{key}': cannot load {spec!r} ({e})") from None
    return obj


class SeedTask:
    """The embedded "task" of an environment that makes its own episodes: one problem per episode seed
    (``problem``: ``"seed <s>"``; ``meta["seed"]``), training and held-out seeds apart."""

    identity = "env-seeds"

    def __init__(self, seed: int = 0):
        self.seed = seed

    def problems(self, n: int, *, split: str = "train", exclude: Optional[set] = None) -> list[Problem]:
        base = EVAL_SEED_BASE if split == "eval" else 0
        out = []
        for i in range(n):
            s = base + self.seed * 100_003 + i
            text = f"seed {s}"
            if exclude and text in exclude:
                continue
            out.append(Problem(problem_id=s, problem=text, answer="", meta={"seed": s}))
        return out


class ObservationFormat:
    """A conversation format whose first prompt is an observation (an optional system message, then the
    observation as the user message); the runtime's length check renders a problem's text in its place."""

    def __init__(self, conversation_format, system: Optional[str], name: str):
        self.conversation, self.system, self.name = conversation_format, system, name

    def messages(self, observation: str) -> list:
        from satseq.envs.conversation import Message

        return ([Message("system", self.system)] if self.system else []) + [Message("user", observation)]

    def single(self, problem: str) -> str:
        return self.conversation.render(self.messages(problem), add_generation_prompt=True)

    def encode(self, text: str) -> list[int]:
        return self.conversation.encode(text)


def held_out_rollout(env, cfg, rt, workflow, generator, metrics: Callable[[list], dict]) -> dict:
    """One episode per held-out problem, played by a workflow like the run's that records nothing in the
    run's journal, graded, then ``metrics(episodes)`` under ``eval/``."""
    from satseq.rewards.turn_rewards import grade_episodes

    held = env.make_workflow(cfg, dict(workflow.agents), rt.fmt, rt.sampling, options={"journal": False})
    episodes = held.rollout(rt.eval, rt.pool, rt.engine, group_size=1, generator=generator)
    grade_episodes(episodes)
    out = {f"eval/{k}": v for k, v in metrics(episodes).items()}
    out["eval/accuracy"] = sum(ep.prediction_correct for ep in episodes) / max(1, len(episodes))
    return out
