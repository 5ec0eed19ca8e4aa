"""The environment contract: every registered algorithm trains in every registered environment it
declares it can train (:meth:`satseq.methods.base.Method.trains`), 2 stages on the tiny model.

A toy environment is defined and registered in this file and nowhere else: a two-turn protocol
(``draft`` answers, then ``final`` answers again shown the draft), its own reward (each turn's
correctness, plus ``env.toy_two_turn.agree_bonus`` when the final answer keeps a correct draft) and its
own config section (``env.toy_two_turn.*``, set on the command line). It trains with GRPO and with the
shared policy without any edit under satseq/, which is the proof that adding an environment is one
file. A run of it is evaluated by ``satseq eval`` in the same environment.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import Field

from satseq.config.section import Section
from satseq.envs.base import Environment
from satseq.records import Episode, Turn
from satseq.registry import env_names, get_env, get_method, method_names, register_env
from satseq.rewards.extract import extract_answer
from satseq.rewards.grade import is_equivalent
from satseq.workflows.base import EpisodeWorkflow, TurnSampler

DRAFT, FINAL = "draft", "final"


# ----------------------------------------------------------------------------- the toy environment
class DraftThenFinal(EpisodeWorkflow):
    """Turn 1: ``draft`` answers the problem; turn 2: ``final`` answers it again, shown the draft's answer."""

    name = "toy_two_turn"
    roles = (DRAFT, FINAL)

    def play(self, episodes: list[Episode], turns: TurnSampler) -> None:
        for k, role in enumerate(self.roles):
            agent = self.agents[role]
            texts = [self.fmt.single(ep.problem.problem) if k == 0
                     else self.fmt.relay(ep.problem.problem, [(t.answer, t.text) for t in ep.turns])
                     for ep in episodes]
            for ep, text, gen in zip(episodes, texts, turns.sample(agent, texts)):
                ep.turns.append(Turn.from_generation(gen, role=role, agent=agent, index=k, prompt_text=text,
                                                     answer=extract_answer(gen.text)))
        for ep in episodes:
            ep.prediction = ep.turns[-1].answer


class ToyTwoTurnConfig(Section):
    """``env.toy_two_turn``: the toy environment's settings."""

    agree_bonus: float = Field(0.5, ge=0.0, description="reward added to the final turn when it keeps a correct draft")


@register_env
class ToyTwoTurn(Environment):
    name = "toy_two_turn"
    title = "draft, then a final answer shown the draft"
    config_section = ("toy_two_turn", ToyTwoTurnConfig)
    max_turns = 2

    def role_names(self, cfg):
        return [DRAFT, FINAL]

    def make_workflow(self, cfg, roles, prompt_format, sampling, options=None):
        return DraftThenFinal(roles, prompt_format, sampling)

    def assign_rewards(self, cfg, episodes, ctx) -> dict:
        kept = 0
        for ep in episodes:
            for t in ep.turns:
                t.correct = t.answer is not None and is_equivalent(t.answer, ep.problem.answer)
                t.reward = float(t.correct)
            draft, final = ep.turns
            if draft.correct and final.correct:
                final.reward += cfg.env.toy_two_turn.agree_bonus
                kept += 1
            ep.prediction_correct = final.correct
        return {"toy/kept_rate": kept / max(1, len(episodes)), "toy/bonus": cfg.env.toy_two_turn.agree_bonus}

    def rollout_metrics(self, cfg, episodes) -> dict:
        return {"toy/turns": sum(len(ep.turns) for ep in episodes) / max(1, len(episodes))}


# ----------------------------------------------------------------------------- the contract
FAST = ["trainer.train_batch_size=2", "grpo.group_size=2", "sat_seq.group_size=2", "rollout.max_new_tokens=6",
        "data.train_size=8", "data.eval_size=4", "threads=1", "trainer.tensorboard=false",
        "trainer.progress=false", "trainer.num_stages=2", "trainer.eval_every=2", "ppo.lr=1e-3", "sat_seq.lr=1e-3",
        "apo.n_samples=2", "sat_seq.certificate.prompts=0"]


#: the settings an environment needs to run at all: the classes the adapters run (tests/test_field_envs.py)
ENV_SETTINGS = {"gym_text": ["env.gym_text.factory=test_field_envs:GuessDigit", "env.max_turns=2"],
                "trl_env": ["env.trl_env.factory=test_field_envs:Vault"]}


def _pairs() -> list[tuple[str, str]]:
    """(method, env) for every method and every environment it trains, but its own default environment
    (tests/test_method_contract.py runs each method there, with a kill and a resume)."""
    out = []
    for m in method_names():
        method = get_method(m)
        out += [(m, e) for e in env_names() if e != method.env and method.trains(get_env(e))]
    return out


def test_the_toy_env_is_registered_from_this_file_alone():
    assert "toy_two_turn" in env_names()
    assert type(get_env("toy_two_turn")).__module__ == __name__


def test_the_toy_env_section_is_mounted_and_checked(tmp_path):
    from satseq.config import load_config
    from satseq.errors import ConfigError

    cfg = load_config(None, ["method=grpo", "env.name=toy_two_turn", "env.toy_two_turn.agree_bonus=0.25"])
    assert cfg.env.toy_two_turn.agree_bonus == 0.25
    with pytest.raises(ConfigError, match="env.toy_two_turn.bonus"):
        load_config(None, ["method=grpo", "env.name=toy_two_turn", "env.toy_two_turn.bonus=1"])
    with pytest.raises(ConfigError, match="env.max_turns"):
        load_config(None, ["method=grpo", "env.name=toy_two_turn", "env.max_turns=3"])
    with pytest.raises(ConfigError, match="env.name.*unknown environment 'nope'"):
        load_config(None, ["method=grpo", "env.name=nope"])


def test_an_algorithm_refuses_an_environment_it_cannot_train():
    from satseq.config import load_config
    from satseq.errors import ConfigError

    with pytest.raises(ConfigError, match="config key 'env.name': method=apo trains in single, not relay"):
        load_config(None, ["method=apo", "env.name=relay"])
    with pytest.raises(ConfigError, match="config key 'env.name': method=shared_policy"):
        load_config(None, ["method=shared_policy", "env.name=single"])


def test_every_pair_is_listed():
    pairs = _pairs()
    assert ("grpo", "toy_two_turn") in pairs and ("shared_policy", "toy_two_turn") in pairs
    assert ("grpo", "relay") in pairs and ("shared_policy", "coach") in pairs
    assert not any(m == "apo" for m, _ in pairs)  # A*-PO trains in single only


@pytest.mark.parametrize("method,env", _pairs())
def test_env_contract(method, env, tiny_dir, tmp_path):
    import satseq

    r = satseq.train(None, [f"model.path={tiny_dir}", f"method={method}", f"env.name={env}", *FAST,
                            *ENV_SETTINGS.get(env, []),
                            f"output_dir={tmp_path}", "run_name=r"])
    assert len(r.metrics) == 2
    info = json.loads((r.run_dir / "run_info.json").read_text())
    assert info["env"] == env and info["method"] == method
    e = get_env(env)
    roles = e.role_names(r.config)
    if roles is not None:  # one policy in every role: each turn of every episode is the policy's; a
        # multi-agent method in a game (env.name=textarena): one agent per role, named after it
        assert set(info["agents"]) == (set(roles) if method in ("sat_seq", "simultaneous") else {"policy"})
    assert any(k.endswith("/loss") for k in r.final), sorted(r.final)
    if env == "toy_two_turn":  # its own reward and metrics reached the run's rows
        assert all(row["toy/bonus"] == 0.5 and row["toy/turns"] == 2.0 for row in r.metrics)


@pytest.mark.parametrize("method", ["grpo", "shared_policy"])
def test_the_toy_env_trains_resumes_and_is_evaluated(method, tiny_dir, tmp_path):
    """The toy environment with GRPO and with the shared policy, through the CLI: its section's key from
    the command line, a run interrupted after stage 1 and resumed equals one run straight, and
    ``satseq eval`` replays the run in the toy environment."""
    from typer.testing import CliRunner

    from satseq.cli import app

    def train(out: Path, *extra):
        res = CliRunner().invoke(app, ["train", f"model.path={tiny_dir}", f"method={method}",
                                       "env.name=toy_two_turn", "env.toy_two_turn.agree_bonus=0.25", *FAST,
                                       f"output_dir={out}", "run_name=r", *extra])
        assert res.exit_code == 0, res.output[-2000:]
        return [json.loads(x) for x in (out / "r" / "metrics.jsonl").read_text().splitlines()]

    def drop_time(rows):
        return [{k: v for k, v in row.items() if not k.startswith("time") and k != "wall_time"} for row in rows]

    straight = train(tmp_path / "a")
    from satseq.api import load
    from satseq.loop import train as run_train

    run_train(load(None, [f"model.path={tiny_dir}", f"method={method}", "env.name=toy_two_turn",
                          "env.toy_two_turn.agree_bonus=0.25", *FAST, f"output_dir={tmp_path / 'b'}", "run_name=r"]),
              stop_after=1)
    assert len((tmp_path / "b" / "r" / "metrics.jsonl").read_text().splitlines()) == 1
    resumed = train(tmp_path / "b")
    assert drop_time(straight) == drop_time(resumed)
    assert all(row["toy/bonus"] == 0.25 for row in straight)

    ev = CliRunner().invoke(app, ["eval", "--checkpoint_dir", str(tmp_path / "a" / "r"), "--dataset", "embedded",
                                  "--limit", "3", "--output_dir", str(tmp_path / "ev"), "--max_new_tokens", "6",
                                  "--threads", "1"])
    assert ev.exit_code == 0, ev.output[-2000:]
    assert "workflow: toy_two_turn" in (tmp_path / "ev" / "inference_config.yaml").read_text()
    rows = [json.loads(x) for x in (tmp_path / "ev" / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(len(r["agent_answers"][0]) == 2 for r in rows)  # two turns per episode
