"""Environments written for other frameworks, run unchanged: a class in TRL's ``environment_factory`` shape
(``env.name=trl_env``) and a gymnasium text environment (``env.name=gym_text``). Each plays scripted
episodes exactly as its own framework's contract says, and trains with GRPO on the tiny model."""
from __future__ import annotations

import json

import gymnasium
import pytest
import torch

from conftest import ScriptedEngine, ScriptedPool
from satseq.config import load_config
from satseq.errors import ConfigError
from satseq.records import Problem
from satseq.registry import get_env
from satseq.rollout.types import SamplingParams

FAST = ["trainer.train_batch_size=2", "grpo.group_size=2", "rollout.max_new_tokens=8", "data.train_size=8",
        "data.eval_size=4", "threads=1", "trainer.tensorboard=false", "trainer.progress=false",
        "trainer.num_stages=2", "trainer.eval_every=2", "ppo.lr=1e-3"]


# ----------------------------------------------------------------------------- a TRL environment class
class Vault:
    """TRL's shape: ``reset(**row)``, public methods as tools, ``get_reward()`` from the state."""

    def reset(self, **row) -> str:
        self.code, self.opened, self.tries = int(row["answer"]), False, 0
        return " Open the vault: call try_code."

    def try_code(self, code: int) -> str:
        """
        Try a code on the vault.

        Args:
            code: The code to try.
        """
        self.tries += 1
        self.opened = self.opened or code == self.code
        return "open" if code == self.code else ("higher" if code < self.code else "lower")

    def get_reward(self) -> float:
        return 1.0 if self.opened else 0.0


class NoReset:
    def try_code(self, code: int) -> str:
        """
        Try a code.

        Args:
            code: The code.
        """
        return "no"


# ----------------------------------------------------------------------------- a gymnasium text environment
class GuessDigit(gymnasium.Env):
    """Guess the digit the seed chose; each wrong guess is told higher or lower; reward 1 when right."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.digit = int(self.np_random.integers(0, 10))
        return "Guess a digit from 0 to 9.", {}

    def step(self, action):
        guess = next((int(c) for c in str(action) if c.isdigit()), None)
        if guess == self.digit:
            return "right", 1.0, True, False, {}
        return ("higher" if guess is not None and guess < self.digit else "lower"), 0.0, False, False, {}



def _play(env_name, overrides, tok, script, problems):
    cfg = load_config(None, ["method=grpo", f"env.name={env_name}", *overrides])
    env = get_env(env_name)
    fmt = env.prompt_format("embedded", tok, cfg)
    wf = env.make_workflow(cfg, {"policy": "policy"}, fmt, SamplingParams(max_new_tokens=64),
                           options={"journal": False})
    eps = wf.rollout(problems, ScriptedPool(tok), ScriptedEngine(tok, script), group_size=1,
                     generator=torch.Generator().manual_seed(0))
    from satseq.methods.base import RewardContext

    env.assign_rewards(cfg, eps, RewardContext())
    return cfg, eps


def test_a_trl_environment_runs_unchanged(tiny):
    _, tok = tiny

    def script(prompt):  # a bisection, as a policy would learn it
        if "Open the vault" in prompt and "tool" not in prompt:
            return '<tool_call>{"name": "try_code", "arguments": {"code": 5}}</tool_call>'
        if prompt.rstrip().endswith("higher"):
            return '<tool_call>{"name": "try_code", "arguments": {"code": 7}}</tool_call>'
        return "done"

    _, (ep,) = _play("trl_env", [f"env.trl_env.factory={__name__}:Vault", "env.trl_env.parser=hermes"], tok, script,
                     [Problem(problem_id=0, problem="The vault.", answer="7")])
    assert "The vault. Open the vault: call try_code." in ep.turns[0].prompt_text  # reset's text, appended
    assert [t.info.get("tool_results") for t in ep.turns] == [["higher"], ["open"], None]
    assert ep.info["env_reward"] == 1.0 and [t.reward for t in ep.turns] == [0.0, 0.0, 1.0]  # get_reward owns it


def test_a_trl_class_without_reset_is_refused():
    with pytest.raises(ConfigError, match="env.trl_env.factory.*has no reset"):
        load_config(None, ["method=grpo", "env.name=trl_env", f"env.trl_env.factory={__name__}:NoReset"])
    with pytest.raises(ConfigError, match="env.trl_env.factory.*needs the environment class"):
        load_config(None, ["method=grpo", "env.name=trl_env"])


def test_a_gymnasium_text_environment_runs_unchanged(tiny):
    _, tok = tiny
    guesses = iter("5738")

    def script(prompt):
        return f"I guess {next(guesses)}"

    cfg, eps = _play("gym_text", [f"env.gym_text.factory={__name__}:GuessDigit", "env.max_turns=3"], tok, script,
                     [Problem(problem_id=7, problem="seed 7", answer="", meta={"seed": 7})])
    (ep,) = eps
    assert ep.turns[0].prompt_text.startswith("Guess a digit")
    n = len(ep.turns)
    assert 1 <= n <= 3 and ep.info["stop"] in ("terminated", "turn_limit")
    assert ep.info["return"] == (1.0 if ep.info["stop"] == "terminated" else 0.0)
    assert ep.turns[-1].reward == ep.info["return"] and all(t.reward == 0.0 for t in ep.turns[:-1])
    if n > 1:  # the next observation continues the conversation token for token
        k = len(ep.turns[0].prompt_ids) + len(ep.turns[0].response_ids)
        assert ep.turns[1].prompt_ids[:k] == ep.turns[0].prompt_ids + ep.turns[0].response_ids


def test_gym_text_needs_one_source():
    with pytest.raises(ConfigError, match="exactly one of env.gym_text.id and env.gym_text.factory"):
        load_config(None, ["method=grpo", "env.name=gym_text"])
    with pytest.raises(ConfigError, match="env.gym_text.id"):
        load_config(None, ["method=grpo", "env.name=gym_text", "env.gym_text.id=NoSuchEnv-v0"])


@pytest.mark.parametrize("env,extra", [("trl_env", [f"env.trl_env.factory={__name__}:Vault"]),
                                       ("gym_text", [f"env.gym_text.factory={__name__}:GuessDigit",
                                                     "env.max_turns=2"])])
def test_grpo_trains_in_them(env, extra, tiny_dir, tmp_path):
    import satseq

    r = satseq.train(None, [f"model.path={tiny_dir}", "method=grpo", f"env.name={env}", *extra, *FAST,
                            f"output_dir={tmp_path}", "run_name=r"])
    assert len(r.metrics) == 2 and any(k.startswith(("tools/", "gym/")) for k in r.final)
    ev = satseq.evaluate(r.run_dir, dataset="embedded", limit=2, max_new_tokens=6, threads=1,
                         output_dir=tmp_path / "ev")
    assert ev["n_problems"] == 2
    rows = [json.loads(x) for x in (tmp_path / "ev" / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 2
