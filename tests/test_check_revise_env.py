"""``env.name=check_revise``: a solver, a checker that may run Python in the sandbox before its verdict, and a
reviser after a verdict that is not "correct" (PAG's rule); per-seat rewards and metrics; the last turn's
reward is the outcome; per-role credit; training with an agent per seat (SAT-Seq, simultaneous) and with
one policy (shared_policy, GRPO), an exact resume, and ``satseq eval`` in the environment."""
from __future__ import annotations

import json

import pytest
import torch

from conftest import ScriptedEngine, ScriptedPool
from satseq.config import load_config
from satseq.methods.base import RewardContext
from satseq.records import Problem
from satseq.registry import get_env
from satseq.rollout.types import SamplingParams

PROBLEMS = [Problem(problem_id=0, problem="What is 17 + 25?", answer="42"),
            Problem(problem_id=1, problem="What is 38 + 45?", answer="83")]
ROLES = {"solver": "solver", "checker": "checker", "reviser": "reviser"}



def _play(tiny, script, *extra):
    _, tok = tiny
    cfg = load_config(None, ["method=sat_seq", "env.name=check_revise", *extra])
    env = get_env("check_revise")
    fmt = env.prompt_format("chat", tok, cfg)  # the tiny tokenizer has no chat template: the plain format
    wf = env.make_workflow(cfg, ROLES, fmt, SamplingParams(max_new_tokens=64), options={"journal": False})
    eng = ScriptedEngine(tok, script)
    eps = wf.rollout(PROBLEMS, ScriptedPool(tok), eng, generator=torch.Generator().manual_seed(0))
    env.assign_rewards(cfg, eps, RewardContext())
    return env, cfg, eps, eng


def _seat(prompt: str) -> str:
    if "judged its answer" in prompt:
        return "reviser"
    return "checker" if "A proposed solution" in prompt else "solver"


def test_the_checker_runs_the_arithmetic_then_judges_and_the_reviser_fixes_a_wrong_attempt(tiny):
    def script(prompt):
        seat, first = _seat(prompt), "17" in prompt
        if seat == "solver":  # right on the first problem, wrong on the second
            return "17 + 25 = 42. The answer is 42." if first else "38 + 45 = 73. The answer is 73."
        if seat == "checker":
            if "python:" not in prompt:  # its first turn: run the sum
                return "```python\nprint(17 + 25)\n```" if first else "```python\nprint(38 + 45)\n```"
            return "The answer is correct" if first else "The answer is wrong"
        return "38 + 45 = 83. The answer is 83."

    env, cfg, (a, b), _ = _play(tiny, script)
    assert [t.role for t in a.turns] == ["solver", "checker", "checker"] and a.info["stop"] == "accepted"
    assert a.turns[1].info["tool_results"] == ["42"] and "python: 42" in a.turns[2].prompt_text
    assert [t.role for t in b.turns] == ["solver", "checker", "checker", "reviser"] and b.info["stop"] == "revised"
    rev = b.turns[3]
    assert "judged its answer wrong" in rev.prompt_text and "printed: 83" in rev.prompt_text
    assert a.prediction == "42" and b.prediction == "83" and a.prediction_correct and b.prediction_correct
    # per seat: the attempt's score, 0 for a program, the verdict's correctness, the revision's score
    assert [t.reward for t in a.turns] == [1.0, 0.0, 1.0]
    assert [t.reward for t in b.turns] == [0.0, 0.0, 1.0, 1.0]
    m = env.rollout_metrics(cfg, [a, b])
    assert m["solver/accuracy"] == 0.5 and m["checker/balanced_accuracy"] == 1.0
    assert m["checker/tool_calls"] == 1.0 and m["checker/tool_errors"] == 0.0
    assert m["reviser/revision_rate"] == 0.5 and m["reviser/fixed"] == 1.0 and "reviser/broke" not in m
    assert m["final/accuracy"] == 1.0


def test_a_constant_verdict_scores_half_balanced_and_no_verdict_is_a_revision(tiny):
    def script(prompt):
        seat, first = _seat(prompt), "17" in prompt
        if seat == "solver":
            return "The answer is 42." if first else "The answer is 73."
        if seat == "checker":  # judges without a program: "wrong" on both, or nothing on the second
            return "The answer is wrong" if first else "I am not sure."
        return "The answer is 40." if first else "The answer is 73."  # breaks a right attempt, keeps a wrong one

    env, cfg, (a, b), _ = _play(tiny, script)
    assert [t.role for t in a.turns] == ["solver", "checker", "reviser"]
    assert a.turns[1].info["verdict"] == "wrong" and b.turns[1].info["verdict"] is None
    assert [t.reward for t in a.turns] == [1.0, 0.0, 0.0] and [t.reward for t in b.turns] == [0.0, 0.0, 0.0]
    m = env.rollout_metrics(cfg, [a, b])
    assert m["checker/correct_recall"] == 0.0 and m["checker/wrong_recall"] == 0.0
    assert m["checker/no_verdict"] == 0.5 and m["checker/verdict_accuracy"] == 0.0
    assert m["reviser/broke"] == 1.0 and m["reviser/fixed"] == 0.0 and m["final/accuracy"] == 0.0
    assert "checker/tool_calls" in m and m["checker/tool_calls"] == 0.0


def test_the_tool_budget_bounds_the_checker(tiny):
    def script(prompt):
        seat = _seat(prompt)
        if seat == "solver":
            return "The answer is 42." if "17" in prompt else "The answer is 83."
        if seat == "checker":  # always another program: the one past the budget ends its turns, no verdict
            return "```python\nprint(1/0)\n```"
        return "The answer is 42." if "17" in prompt else "The answer is 83."

    env, cfg, eps, eng = _play(tiny, script, "env.check_revise.max_tool_calls=2")
    for ep in eps:
        checks = [t for t in ep.turns if t.role == "checker"]
        assert len(checks) == 3 and [t.info["final"] for t in checks] == [False, False, True]
        assert "ZeroDivisionError" in checks[0].info["tool_results"][0] and ep.info["tool_calls"] == 2
        assert ep.turns[-1].role == "reviser" and ep.info["verdict"] is None
    assert env.rollout_metrics(cfg, eps)["checker/tool_errors"] == 2.0
    _, _, eps0, _ = _play(tiny, script, "env.check_revise.max_tool_calls=0")  # no tool: one checker turn
    assert all([t.role for t in ep.turns] == ["solver", "checker", "reviser"] for ep in eps0)
    assert all("tool_results" not in ep.turns[1].info for ep in eps0)


def test_the_last_turns_reward_is_the_outcome_and_credit_is_per_role(tiny):
    """Whether the episode ends on the checker's "correct" or on a revision, its last turn's reward is the
    prediction's correctness (what GRPO credits every turn with); the reviser's advantages are normalised
    among the revisions alone."""
    from satseq.methods.sat_seq.adv.seqaware import seqaware_advantages
    from satseq.update.turn_credit import turn_advantages

    verdicts = {}

    def script(prompt):
        seat, first = _seat(prompt), "17" in prompt
        if seat == "solver":
            return "The answer is 42." if first else "The answer is 73."
        if seat == "checker":
            return verdicts[first]
        return "The answer is 83." if not first else "The answer is 41."

    for v in ("The answer is correct", "The answer is wrong"):
        for w in ("The answer is correct", "The answer is wrong"):
            verdicts.update({True: v, False: w})
            env, cfg, eps, _ = _play(tiny, script)
            for ep in eps:
                assert ep.turns[-1].reward == float(ep.prediction_correct)
    verdicts.update({True: "The answer is correct", False: "The answer is wrong"})
    env, cfg, eps, _ = _play(tiny, script)
    for ep in eps:
        ep.group = 0
    adv = turn_advantages(seqaware_advantages, eps, credit=env.credit, gamma=1.0, lam=1.0, A_clip=5.0)
    assert adv[1, 2].item() == 0.0  # the only revision: nothing to compare it with
    assert adv[0, 0].item() > 0 > adv[1, 0].item()  # the right attempt above the wrong one


def test_config_checks():
    from satseq.errors import ConfigError

    cfg = load_config(None, ["method=grpo", "env.name=check_revise", "env.check_revise.max_tool_calls=2"])
    assert cfg.env.check_revise.max_tool_calls == 2  # GRPO plays every seat: the last turn is the outcome
    with pytest.raises(ConfigError, match="env.max_turns"):
        load_config(None, ["method=shared_policy", "env.name=check_revise", "env.max_turns=3"])
    with pytest.raises(ConfigError, match="env.check_revise.max_tool_calls"):
        load_config(None, ["method=shared_policy", "env.name=check_revise", "env.check_revise.max_tool_calls=-1"])
    with pytest.raises(ConfigError, match="sat_seq.agents"):
        load_config(None, ["method=sat_seq", "env.name=check_revise", "sat_seq.agents=[{name: a}, {name: b}]"])


FAST = ["env.name=check_revise", "trainer.train_batch_size=2", "grpo.group_size=2", "sat_seq.group_size=2",
        "rollout.max_new_tokens=8", "data.train_size=8", "data.eval_size=2", "threads=1",
        "trainer.tensorboard=false", "trainer.progress=false", "trainer.num_stages=2", "trainer.eval_every=2",
        "sat_seq.certificate.prompts=0", "sat_seq.lr=1e-3"]


def test_sat_seq_trains_it_resumes_exactly_after_a_kill_and_is_evaluated_in_it(tiny_dir, tmp_path):
    """An agent per seat under SAT-Seq through the CLI: a run SIGKILLed in the middle of stage 1 and run again
    equals one run straight (metrics and weights); ``satseq eval`` replays it in the environment."""
    from contract_cli import metric_rows, train_kill_resume
    from typer.testing import CliRunner

    from satseq.cli import app

    args = ["train", f"model.path={tiny_dir}", "method=sat_seq", *FAST, f"output_dir={tmp_path}"]
    a, b = train_kill_resume(__file__, args, tmp_path)
    rows = metric_rows(a)
    assert len(rows) == 2 and rows == metric_rows(b)
    assert "eval/checker/verdict_accuracy" in rows[-1] and "eval/vote_accuracy" in rows[-1]
    assert set(json.loads((a / "run_info.json").read_text())["agents"]) == {"solver", "checker", "reviser"}
    ev = CliRunner().invoke(app, ["eval", "--checkpoint_dir", str(a), "--dataset", "embedded",
                                  "--limit", "3", "--n", "2", "--output_dir", str(tmp_path / "ev"),
                                  "--max_new_tokens", "8", "--threads", "1"])
    assert ev.exit_code == 0, ev.output[-2000:]
    lines = [json.loads(x) for x in (tmp_path / "ev" / "predictions.jsonl").read_text().splitlines()]
    assert len(lines) == 3 and all(len(r["verdicts"]) == 2 and r["roles"][0][0] == "solver" for r in lines)
    metrics = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert metrics["workflow"] == "self_verify" and "turn1" in metrics


@pytest.mark.parametrize("method", ["simultaneous", "shared_policy", "grpo"])
def test_it_trains_with_every_seating(method, tiny_dir, tmp_path):
    import satseq

    r = satseq.train(None, [f"model.path={tiny_dir}", f"method={method}", *FAST, f"output_dir={tmp_path}",
                            f"run_name={method}"])
    info = json.loads((r.run_dir / "run_info.json").read_text())
    assert set(info["agents"]) == ({"solver", "checker", "reviser"} if method == "simultaneous" else {"policy"})
    assert len(r.metrics) == 2 and "solver/accuracy" in r.final and "checker/says_correct" in r.final
