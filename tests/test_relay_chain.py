"""The embedded chain relay task (``data.embedded_task=chain``): solutions by hand, transcripts by
relay position, behaviour tags, the config key that routes training and ``satseq eval`` to it, and
the team-only reward that makes a stage-1 answer worth writing."""
import json
import random

import pytest
from satseq.data.arithmetic import render_prompt
from satseq.data.relay_chain import (COPY, MIX, STAGE1, STAGE2, ChainTask, behaviour, behaviour_shares,
                                     chain_examples, stage1_solution, stage2_solution, transcript)
from satseq.data.sum_of_three import SumOfThreeTask
from satseq.records import Episode, Problem, Turn
from satseq.rewards.extract import extract_answer
from satseq.rewards.turn_rewards import assign_relay_rewards


def test_stages_by_hand():
    # 347 + 289 = 636 (stage 1: columns 7+9=16, 4+8+1=13, 3+2+1=06), then 636 + 126 = 762 (stage 2:
    # 6+6=12, 3+2+1=06, 6+1+0=07); each restates its two operands first, in the base task's layout
    assert stage1_solution(347, 289) == "part:347+289=7+9+0=16,4+8+1=13,3+2+1=06;\\boxed{636}"
    assert stage2_solution(636, 126) == "next:636+126=6+6+0=12,3+2+1=06,6+1+0=07;\\boxed{762}"
    assert extract_answer(stage2_solution(998, 999)) == "1997"


def test_transcripts_by_position():
    rng = random.Random(0)
    a, b, c = 347, 289, 126
    seen = {1: set(), 2: set(), 3: set()}
    for _ in range(800):
        pos = rng.randint(1, 3)
        prompt, completion = transcript(pos, a, b, c, rng)
        slots = prompt.split("|")
        assert prompt.endswith("347+289+126=") and len(prompt) == len(render_prompt("347+289+126"))
        shown = [s for s in slots[:2] if s != "____"]
        assert len(shown) == pos - 1  # each agent sees exactly the agents before it
        kind = behaviour(completion)
        seen[pos].add(kind)
        answer = extract_answer(completion)
        if kind == "stage1":
            assert pos == 1 and answer == str(a + b) and completion.startswith(STAGE1)
        elif kind == "stage2":  # builds on the first agent's answer, whatever it was
            assert pos >= 2 and answer == str(int(shown[0]) + c) and completion.startswith(STAGE2)
        elif kind == "copy":
            assert pos == 3 and completion == COPY + "\\boxed{" + str(int(shown[1])) + "}"
        else:
            assert answer == str(a + b + c)
    assert seen == {p: set(MIX[p]) for p in (1, 2, 3)}


def test_examples_skip_held_out_problems_and_are_deterministic():
    task = ChainTask(seed=0)
    held = {p.problem for p in task.problems(200, split="eval")}
    ex = chain_examples(500, seed=0, exclude=held)
    assert ex == chain_examples(500, seed=0, exclude=held)
    assert not {p.rsplit("|", 1)[1][:-1] for p, _ in ex} & held
    # the chain task's problems are the sum-of-three problems under their own identity
    assert [p.problem for p in task.problems(50, split="eval")] == \
        [p.problem for p in SumOfThreeTask(seed=0).problems(50, split="eval")]
    assert ChainTask.identity == "embedded-chain"


def _episode(texts, answer="762"):
    ep = Episode(problem=Problem(problem_id="p", problem="347+289+126", answer=answer), group=0)
    for k, t in enumerate(texts):
        ep.turns.append(Turn(role=f"agent_{k + 1}", index=k, prompt_text="", prompt_ids=[], response_ids=[],
                             behaviour_logprobs=[], text=t, finish_reason="stop", answer=extract_answer(t)))
    return ep


def test_team_reward_only_credits_a_stage_one_answer_through_the_vote():
    ep = _episode(["part:...;\\boxed{636}", "next:...;\\boxed{762}", "same:\\boxed{762}"])
    ep.prediction = "762"
    assign_relay_rewards([ep], own=0.0, team=1.0)
    assert [t.reward for t in ep.turns] == [0.0, 0.0, 1.0]
    assert [t.correct for t in ep.turns] == [False, True, True]
    shares = behaviour_shares([ep, _episode(["\\boxed{1}", "7+9+6+0=22;\\boxed{2}", "same:\\boxed{2}"])])
    assert shares["chain/agent_1/stage1"] == 0.5 and shares["chain/agent_1/hasty"] == 0.5
    assert shares["chain/agent_2/single"] == 0.5 and shares["chain/agent_3/copy"] == 1.0


def test_config_key_routes_training_and_eval_to_the_chain_task(tmp_path):
    from satseq.config.loader import load_config
    from satseq.errors import ConfigError
    from satseq.eval.targets import embedded_task_of
    from satseq.models.embedded_tasks import embedded_task
    from satseq.registry import get_method

    cfg = load_config(None, ["method=sat_seq", "data.embedded_task=chain"])
    assert isinstance(embedded_task(cfg.data.embedded_task, get_method("sat_seq").environment(cfg)), ChainTask)
    assert not isinstance(embedded_task("default", get_method("sat_seq").environment(cfg)), SumOfThreeTask)
    with pytest.raises(ConfigError, match="data.embedded_task"):
        load_config(None, ["data.embedded_task=chains"])
    (tmp_path / "run_info.json").write_text(json.dumps({"method": "sat_seq", "embedded_task": "chain"}))
    assert embedded_task_of(tmp_path) == "chain"
    assert embedded_task_of(tmp_path / "missing") == "default"


def test_eval_of_a_chain_run_uses_the_chain_task():
    from satseq.eval.runner import _load_dataset
    from satseq.registry import get_env

    problems, identity = _load_dataset("embedded", data_dir=None, limit=5, env=get_env("relay"),
                                       embedded_task="chain")
    assert identity.startswith("embedded-chain:eval") and problems[0].problem.count("+") == 2
    _, default = _load_dataset("embedded", data_dir=None, limit=5, env=get_env("relay"))
    assert default.startswith("embedded:eval")


def test_sat_seq_trains_on_the_chain_task_and_logs_behaviours(tiny_dir, tmp_path):
    import satseq

    r = satseq.train(overrides=[f"model.path={tiny_dir}", "method=sat_seq", "data.embedded_task=chain",
                                "reward.own=0", "trainer.num_stages=2", "trainer.train_batch_size=2",
                                "sat_seq.group_size=2", "rollout.max_new_tokens=6", "data.train_size=8",
                                "data.eval_size=4", "threads=1", "trainer.tensorboard=false",
                                "trainer.progress=false", "sat_seq.certificate.prompts=0",
                                f"output_dir={tmp_path}", "run_name=chain"], console=lambda *a: None)
    info = json.loads((r.run_dir / "run_info.json").read_text())
    assert info["embedded_task"] == "chain"
    shares = {k: v for k, v in r.metrics[-1].items() if k.startswith("chain/agent_1/")}
    assert shares and abs(sum(shares.values()) - 1.0) < 1e-9
    assert "embedded_task: chain" in (r.run_dir / "train_config.yaml").read_text()  # a resume keeps the task
    from satseq.registry import get_method
    from satseq.runtime import load_datasets

    train, held_out = load_datasets(r.config, get_method("sat_seq").environment(r.config))  # what the run trained on: sums of three
    assert all(p.problem.count("+") == 2 for p in train + held_out)
