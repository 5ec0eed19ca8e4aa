"""``env.name=code_answer``: a coder whose program the sandbox runs, then an answerer who reads it; the
reward per seat; the answerer's prompt holds what the program printed; training with one policy in both
seats and with an agent per seat."""
from __future__ import annotations

import torch

from conftest import ScriptedEngine, ScriptedPool
from satseq.config import load_config
from satseq.methods.base import RewardContext
from satseq.records import Problem
from satseq.registry import get_env
from satseq.rollout.types import SamplingParams

PROBLEMS = [Problem(problem_id=0, problem="What is 17 * 23?", answer="391"),
            Problem(problem_id=1, problem="What is 12 * 12?", answer="144")]



def _play(tiny, script, *extra):
    _, tok = tiny
    cfg = load_config(None, ["method=shared_policy", "env.name=code_answer", "reward.own=1", "reward.team=2", *extra])
    env = get_env("code_answer")
    fmt = env.prompt_format("embedded", tok, cfg)
    wf = env.make_workflow(cfg, {"coder": "policy", "answerer": "policy"}, fmt, SamplingParams(max_new_tokens=64),
                           options={"journal": False})
    eps = wf.rollout(PROBLEMS, ScriptedPool(tok), ScriptedEngine(tok, script), generator=torch.Generator().manual_seed(0))
    env.assign_rewards(cfg, eps, RewardContext())
    return env, cfg, eps


def test_the_coders_program_runs_and_the_answerer_reads_its_output(tiny):
    def script(prompt):
        if "It printed" not in prompt:  # the coder: a right program for the first problem, a wrong one after
            return "```python\nprint(17 * 23)\n```" if "17" in prompt else "```python\nprint(12 + 12)\n```"
        return "\\boxed{391}" if "17" in prompt else "\\boxed{144}"  # the second answerer corrects the program

    env, cfg, (a, b) = _play(tiny, script)
    assert [t.role for t in a.turns] == ["coder", "answerer"] and a.info["stop"] == "answered"
    assert a.turns[0].info["output"] == "391" and "It printed:\n391" in a.turns[1].prompt_text
    assert b.turns[0].info["output"] == "24" and not b.turns[0].correct and b.prediction_correct
    assert [t.reward for t in a.turns] == [1.0, 3.0] and [t.reward for t in b.turns] == [0.0, 3.0]
    m = env.rollout_metrics(cfg, [a, b])
    assert m == {"code/blocks": 1.0, "code/ran": 1.0, "code/output_correct": 0.5, "answer/accuracy": 1.0,
                 "answer/copies_output": 0.5}


def test_no_program_or_a_failing_one_is_what_the_answerer_reads(tiny):
    def script(prompt):
        if "It printed" not in prompt:
            return "I think it is 391" if "17" in prompt else "```python\nprint(1/0)\n```"
        return "\\boxed{0}"

    env, cfg, (a, b) = _play(tiny, script)
    assert a.turns[0].info["output"].startswith("error: no program") and not a.turns[0].info["wrote"]
    assert "ZeroDivisionError" in b.turns[0].info["output"] and not b.turns[0].info["ran"]
    assert env.rollout_metrics(cfg, [a, b])["code/ran"] == 0.0


def test_it_trains_with_one_policy_and_with_an_agent_per_seat(tiny_dir, tmp_path):
    import satseq

    fast = [f"model.path={tiny_dir}", "env.name=code_answer", "trainer.train_batch_size=2", "grpo.group_size=2",
            "sat_seq.group_size=2", "rollout.max_new_tokens=8", "data.train_size=8", "data.eval_size=2",
            "threads=1", "trainer.tensorboard=false", "trainer.progress=false", "trainer.num_stages=2",
            "trainer.eval_every=2", "sat_seq.certificate.prompts=0", f"output_dir={tmp_path}"]
    for method in ("grpo", "shared_policy"):
        r = satseq.train(None, [*fast, f"method={method}", f"run_name={method}"])
        assert len(r.metrics) == 2 and "code/ran" in r.final and "eval/answer/accuracy" in r.final
