"""MLMT-RL: coach workflow turn logic, the dependence and confidence terms by hand, the coach reward,
the alternating schedule and frozen roles (bit-for-bit), the evaluator's three-turn mode."""
import pytest
import torch

from satseq.config import load_config
from satseq.methods.mlmt.coach_reward import coach_reward, confidence, dependence, solver_scores
from satseq.methods.mlmt.schedule import AlternatingSchedule
from satseq.envs.coach.metrics import mlmt_rollout_metrics
from satseq.registry import get_env
from satseq.methods.mlmt.updater import MLMTUpdater
from satseq.models.agents import AgentPool
from satseq.rollout.types import SamplingParams
from satseq.workflows.coach import CoachWorkflow
from satseq.records import Problem
from satseq.workflows.mlmt_prompts import ChatMLMTFormat, EmbeddedMLMTFormat
from tests.conftest import ScriptedEngine

P = Problem("p0", "347+589", "936")
Q = Problem("p1", "100+200", "300")
CAREFUL = "7+9+0=16,4+8+1=13,3+5+1=09;\\boxed{936}"


def _script(p):
    if p.startswith("____"):
        return "\\boxed{935}"
    if "|tip?|" in p:
        return CAREFUL
    return "\\boxed{936}" if p.startswith("0935:0936") else "\\boxed{1}"


def _pool(tiny, names=("solver", "coach")):
    import copy

    model, tok = tiny
    return AgentPool.full(list(names), [copy.deepcopy(model) for _ in names], tok)


def test_coach_workflow_three_turns_scripted(tiny):
    _, tok = tiny
    eng = ScriptedEngine(tok, _script)
    wf = CoachWorkflow({"solver": "solver", "coach": "coach"}, EmbeddedMLMTFormat(tok), SamplingParams())
    (ep,) = wf.rollout([P], _pool(tiny), eng)
    assert eng.calls == ["____|____|347+589=", "0935|tip?|347+589=", "0935:0936|347+589="]
    assert [t.role for t in ep.turns] == ["solver", "coach", "solver"]
    assert [t.info["turn"] for t in ep.turns] == [1, 2, 3] and [t.index for t in ep.turns] == [0, 1, 2]
    assert tok.decode(ep.turns[2].info["prompt_ids_without_feedback"]) == "0935:____|347+589="
    assert ep.prediction == "936" and ep.info == {"answer_t1": "935", "answer_t3": "936"}


def test_coach_workflow_shared_actor_and_groups(tiny):
    _, tok = tiny
    eng = ScriptedEngine(tok, _script)
    wf = CoachWorkflow({"solver": "actor", "coach": "actor"}, EmbeddedMLMTFormat(tok), SamplingParams())
    eps = wf.rollout([P, Q], _pool(tiny, ["actor"]), eng, group_size=2)
    assert [ep.group for ep in eps] == [0, 0, 1, 1]
    assert all(t.agent == "actor" for ep in eps for t in ep.turns)
    assert len(eng.calls) == 12  # 4 episodes x 3 turns, batched per turn


def test_chat_prompts_show_attempt_and_feedback_only_when_given(tiny):
    _, tok = tiny
    fmt = ChatMLMTFormat(tok, use_chat_template=False)
    with_g = fmt.refine("What is 2+2?", "I think 5", "Count again: 2+2=4")
    without = fmt.refine("What is 2+2?", "I think 5", None)
    assert "I think 5" in with_g and "Count again" in with_g and "Count again" not in without
    assert "I think 5" in fmt.coach("What is 2+2?", "I think 5") and "\\boxed" not in fmt.coach("x", "y")


def test_few_shot_coach_and_refine_prompts_are_used_as_written(tiny, tmp_path):
    """mlmt.coach_prompt / mlmt.refine_prompt: exact text with the attempt's and feedback's tails filled in;
    braces in a problem stay; without the feedback (the dependence term's prompt) {feedback} is empty."""
    from satseq.errors import ConfigError
    from satseq.registry import get_method

    _, tok = tiny
    fmt = ChatMLMTFormat(tok, attempt_budget=8, feedback_budget=6, coach_prompt="Q: {problem} Tried: {attempt}\nCoach:",
                         refine_prompt="Q: {problem} Tried: {attempt} Coach: {feedback}\nA:")
    assert fmt.coach("What is {x}?", "so 3 + 4 = 7") == "Q: What is {x}? Tried: ... + 4 = 7\nCoach:"
    assert fmt.refine("P", "A", "add 3 and 4 first") == "Q: P Tried: A Coach: ... first\nA:"
    assert fmt.refine("P", "A", None) == "Q: P Tried: A Coach: \nA:"
    with pytest.raises(ConfigError, match="mlmt.refine_prompt.*missing \\{feedback\\}"):
        load_config(None, ["method=mlmt", "mlmt.refine_prompt='Q: {problem} {attempt}'"])
    cfg = load_config(None, ["method=mlmt", f"output_dir={tmp_path}", "mlmt.coach_prompt='Coach {problem}: {attempt}'"])
    with pytest.raises(ConfigError, match="^config key 'mlmt.coach_prompt': for chat models only"):
        get_env("coach").prompt_format("embedded", tok, cfg)
    assert get_env("coach").prompt_format("chat", tok, cfg).coach("p", "a") == "Coach p: a"


def _hand_logprobs(model, prompt, response):
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    lsm = torch.log_softmax(logits, -1)
    return [float(lsm[len(prompt) - 1 + i, tok]) for i, tok in enumerate(response)]


def test_dependence_and_confidence_by_hand(tiny):
    model, tok = tiny
    enc = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    # prompts of different lengths exercise the left padding
    with_g = [enc("0935:0936|347+589="), enc("0999:1000|500+500=")]
    without = [enc("0935:____|347+589="), enc("short=")]
    resp = [enc("\\boxed{936}"), enc("7+9=16")]
    conf, dep = solver_scores(model, with_g, without, resp, tok.pad_token_id, temperature=1.0, device="cpu")
    for b in range(2):
        lw, lo = _hand_logprobs(model, with_g[b], resp[b]), _hand_logprobs(model, without[b], resp[b])
        n = len(resp[b])
        assert dep[b].item() == pytest.approx(sum(w - o for w, o in zip(lw, lo)) / n, abs=1e-5)
        assert conf[b].item() == pytest.approx(sum(lw) / n, abs=1e-5)


def test_coach_reward_formula_and_clip():
    lw = torch.tensor([[-0.1, -0.3, 0.0], [-2.0, -1.0, -1.0]])
    lo = torch.tensor([[-3.1, -0.3, 0.0], [-1.0, -1.0, -1.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    dep = dependence(lw, lo, mask)
    assert dep.tolist() == pytest.approx([1.5, -1 / 3])
    assert confidence(lw, mask).tolist() == pytest.approx([-0.2, -4 / 3])
    r = coach_reward(torch.tensor([1.0, 0.0]), confidence(lw, mask), dep, lambda_conf=0.5, lambda_dep=2.0,
                     dep_max=1.0)
    # 1 + 0.5*(-0.2) + 2*min(1.5, 1) ; 0 + 0.5*(-4/3) + 2*max(-1/3, 0)
    assert r.tolist() == pytest.approx([1 - 0.1 + 2.0, -2 / 3])


@pytest.mark.parametrize("a,b", [(1, 15), (1, 20), (2, 3), (3, 1)])
def test_schedule_trains_a_coach_and_b_solver_steps_per_cycle(a, b):
    s = AlternatingSchedule(coach=a, solver=b)
    for cycle in range(3):
        steps = [s.roles_at(cycle * (a + b) + i) for i in range(a + b)]
        assert sum("coach" in r for r in steps) == a and sum("solver" in r for r in steps) == b
        assert all(r == ["solver"] for r in steps[:b]) and all(r == ["coach"] for r in steps[b:])


def test_schedule_one_one_and_frozen_roles():
    assert all(AlternatingSchedule().roles_at(i) == ["solver", "coach"] for i in range(5))
    frozen = AlternatingSchedule(coach=1, solver=2, coach_trainable=False)
    assert all("coach" not in frozen.roles_at(i) for i in range(9))
    with pytest.raises(ValueError):
        AlternatingSchedule(coach=0, solver=1)


def _episodes(tiny, pool):
    """Scripted episodes whose rewards differ inside each group (non-zero advantages everywhere)."""
    _, tok = tiny
    k = {"n": 0}

    def script(p):
        k["n"] += 1
        good = k["n"] % 2 == 0
        if p.startswith("____"):
            return "\\boxed{936}" if good else "\\boxed{900}"
        if "|tip?|" in p:
            return CAREFUL if good else "\\boxed{901}"
        return "\\boxed{936}" if good else "\\boxed{902}"

    wf = CoachWorkflow({"solver": "solver", "coach": "coach"}, EmbeddedMLMTFormat(tok), SamplingParams())
    return wf.rollout([P], pool, ScriptedEngine(tok, script), group_size=4)


def _cfg(*extra):
    return load_config(None, ["method=mlmt", "ppo.lr=1e-2", "ppo.mini_batch_size=4", "ppo.kl_coef=0.01", *extra])


def _changed(pool, name, before):
    return any(not torch.equal(p, before[n]) for n, p in pool.named_trainable(name).items())


def test_updater_follows_schedule_and_never_touches_a_frozen_role(tiny):
    pool = _pool(tiny)
    up = MLMTUpdater(_cfg("mlmt.schedule.coach=1", "mlmt.schedule.solver=2"), pool,
                     {"solver": "solver", "coach": "coach"}, torch.Generator().manual_seed(0))
    trained = []
    for step in range(3):
        eps = _episodes(tiny, pool)
        m = up.assign_rewards(eps)
        assert {"coach/reward", "coach/conf", "coach/dep"} <= set(m)
        before = {n: pool.trainable_state(n) for n in pool.names}
        out = up.update(step, eps)
        trained.append([n for n in pool.names if _changed(pool, n, before[n])])
        assert ("solver/loss" in out) == ("solver" in trained[-1])
    assert trained == [["solver"], ["solver"], ["coach"]]

    pool = _pool(tiny)
    coach_start = pool.trainable_state("coach")
    up = MLMTUpdater(_cfg("mlmt.coach.trainable=false"), pool, {"solver": "solver", "coach": "coach"},
                     torch.Generator().manual_seed(0))
    assert up.agents == ["solver"]
    for step in range(2):
        eps = _episodes(tiny, pool)
        up.assign_rewards(eps)
        up.update(step, eps)
    assert all(torch.equal(p, coach_start[n]) for n, p in pool.named_trainable("coach").items())


def test_rewards_and_per_turn_advantages(tiny):
    pool = _pool(tiny)
    up = MLMTUpdater(_cfg("mlmt.lambda_conf=0", "mlmt.lambda_dep=0"), pool, {"solver": "solver", "coach": "coach"},
                     torch.Generator().manual_seed(0))
    eps = _episodes(tiny, pool)
    up.assign_rewards(eps)
    for ep in eps:  # with both lambdas 0 the coach is paid exactly r(y^)
        assert [t.reward for t in ep.turns] == [float(ep.turns[0].correct), float(ep.turns[2].correct),
                                                float(ep.turns[2].correct)]
    adv = up.advantages(eps)
    for k in range(3):  # each turn index is normalized on its own: zero mean within the group
        assert adv[:, k].sum().item() == pytest.approx(0.0, abs=1e-5)
    m = mlmt_rollout_metrics(eps)
    assert 0 <= m["mlmt/acc_t1"] <= 1 and "mlmt/improvement_rate" in m


def test_rollout_metrics_by_hand():
    from satseq.records import Episode, Problem, Turn

    def ep(answers, gold="7"):
        e = Episode(problem=Problem(problem_id="p", problem="3+4", answer=gold), group=0)
        for k, (role, a) in enumerate(zip(["solver", "coach", "solver"], answers)):
            e.turns.append(Turn(role=role, index=k, prompt_text="", prompt_ids=[], response_ids=[],
                                behaviour_logprobs=[], text="", finish_reason="stop", answer=a,
                                correct=a == gold))
        return e

    eps = [ep(["6", "7", "7"]), ep(["7", "7", "7"]), ep(["7", "5", "5"]), ep(["6", None, "8"])]
    m = mlmt_rollout_metrics(eps)
    assert m["mlmt/acc_t1"] == 0.5 and m["mlmt/acc_t3"] == 0.5 and m["mlmt/coach_accuracy"] == 0.5
    assert m["mlmt/improvement_rate"] == 0.5 and m["mlmt/degradation_rate"] == 0.5
    assert m["mlmt/follows_coach"] == 1.0  # 3 of the 3 episodes where the coach answered
