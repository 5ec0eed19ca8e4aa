"""PAG building blocks: self_verify turn logic (scripted), per-turn rewards, advantages, metrics."""
import pytest
import torch

from satseq.methods.pag.advantages import ROLE_IDS, assign_pag_advantages, pag_advantages
from satseq.envs.self_verify.metrics import collapse_warning, pag_metrics
from satseq.models.agents import AgentPool
from satseq.envs.self_verify.rewards import assign_pag_rewards
from satseq.registry import get_env
from satseq.rollout.types import SamplingParams
from satseq.records import Episode, Problem, Turn
from satseq.workflows.pag_prompts import ChatPAGFormat, EmbeddedPAGFormat, parse_verdict
from satseq.workflows.self_verify import SelfVerifyWorkflow
from tests.conftest import ScriptedEngine

P = Problem("p0", "347+589", "936")


class BatchEngine(ScriptedEngine):
    """Also records the batch size of every generate call."""

    def __init__(self, tokenizer, script):
        super().__init__(tokenizer, script)
        self.batches = []

    def generate(self, model, prompts, sampling, generator=None):
        self.batches.append(len(prompts))
        return super().generate(model, prompts, sampling, generator)


def _run(tiny, script, problems=(P,), group_size=1, **kw):
    model, tok = tiny
    eng = BatchEngine(tok, script)
    wf = SelfVerifyWorkflow("agent_1", EmbeddedPAGFormat(tok), SamplingParams(), **kw)
    eps = wf.rollout(list(problems), AgentPool.full(["agent_1"], [model], tok), eng, group_size=group_size)
    return eps, eng


def _judge(prompt):
    """Verify prompts: the attempt is the first slot; say correct iff it is 0936."""
    return "The answer is correct" if prompt.startswith("0936") else "936=935;The answer is wrong"


def _roles(ep):
    return [t.role for t in ep.turns]


def test_no_revision_after_correct_verdict(tiny):
    eps, eng = _run(tiny, lambda p: "\\boxed{936}" if p.startswith("____") else _judge(p))
    ep = eps[0]
    assert eng.calls == ["____|____|347+589=", "0936|chk?|347+589="]
    assert _roles(ep) == ["policy", "verifier"] and [t.agent for t in ep.turns] == ["agent_1"] * 2
    assert [t.index for t in ep.turns] == [0, 1] and ep.turns[1].answer is None
    assert ep.turns[1].info["verdict"] == "correct" and ep.turns[1].info["judged_turn"] == 0
    assert ep.prediction == "936"
    assert ep.info == {"revised": False, "answer_t1": "936", "final_answer": "936", "policy_turns": 1,
                       "verdicts": ["correct"], "stop": "accepted"}


def test_revision_after_wrong_verdict_and_rewards(tiny):
    def script(p):
        if p.startswith("____"):
            return "\\boxed{935}"
        if "|no__|" in p:  # revision prompt shows the attempt and the verdict
            return "\\boxed{936}"
        return _judge(p)

    eps, eng = _run(tiny, script)
    ep = eps[0]
    assert eng.calls == ["____|____|347+589=", "0935|chk?|347+589=", "0935|no__|347+589=", "0936|chk?|347+589="]
    assert _roles(ep) == ["policy", "verifier", "policy", "verifier"]
    assert [t.info["attempt"] for t in ep.turns] == [1, 1, 2, 2]
    assert ep.info["revised"] and ep.info["answer_t1"] == "935" and ep.prediction == ep.info["final_answer"] == "936"
    assign_pag_rewards(eps, alpha=1.0)
    # y1 wrong: 0; v1 "wrong" on a wrong attempt: 1; y2 wrong->right: 1 + alpha; v2 "correct" on right: 1
    assert [t.reward for t in ep.turns] == [0.0, 1.0, 2.0, 1.0]
    assert ep.prediction_correct and ep.turns[2].info["revision_bonus"] == 1.0


def test_right_to_wrong_revision_and_wrong_verdicts(tiny):
    def script(p):
        if p.startswith("____"):
            return "\\boxed{936}"
        if "|no__|" in p:
            return "\\boxed{937}"
        return "The answer is wrong"  # always rejects

    eps, _ = _run(tiny, script)
    assign_pag_rewards(eps, alpha=0.5)
    # y1 right: 1; v1 "wrong" on a right attempt: 0; y2 right->wrong: 0 - 0.5; v2 "wrong" on wrong: 1
    assert [t.reward for t in eps[0].turns] == [1.0, 0.0, -0.5, 1.0]
    assert eps[0].info["stop"] == "turn_limit" and not eps[0].prediction_correct


@pytest.mark.parametrize("max_turns,verify_last,n_turns", [(1, True, 2), (2, True, 4), (3, True, 6),
                                                          (2, False, 3), (1, False, 1)])
def test_turn_limit(tiny, max_turns, verify_last, n_turns):
    eps, eng = _run(tiny, lambda p: "The answer is wrong" if "chk?" in p else "\\boxed{1}",
                    max_policy_turns=max_turns, verify_last=verify_last)
    ep = eps[0]
    assert len(ep.turns) == n_turns and len(eng.calls) == n_turns
    assert ep.info["policy_turns"] == max_turns and ep.info["revised"] == (max_turns > 1)
    assert _roles(ep) == (["policy", "verifier"] * max_turns)[:n_turns]


def test_unparseable_verdict_revises_and_earns_nothing(tiny):
    eps, _ = _run(tiny, lambda p: "hmm" if "chk?" in p else "\\boxed{936}")
    ep = eps[0]
    assert [t.info.get("verdict") for t in ep.turns] == [None] * 4 and ep.info["revised"]
    assert ep.turns[2].prompt_text == "0936|????|347+589="  # no verdict shown as ????
    assign_pag_rewards(eps)
    assert [t.reward for t in ep.turns] == [1.0, 0.0, 1.0, 0.0]  # no bonus: right -> right


def test_active_episodes_batched_and_drop_out(tiny):
    q = Problem("p1", "100+200", "300")
    # p0: right, accepted after y1; p1: wrong, rejected, revised to right
    answers = {"347+589": "\\boxed{936}", "100+200": "\\boxed{301}"}

    def script(p):
        if "chk?" in p:
            return "ok" if p.startswith(("0936", "0300")) else "301;no"
        if "|no__|" in p:
            return "\\boxed{300}"
        return answers[p.split("|")[-1][:-1]]

    eps, eng = _run(tiny, script, problems=(P, q), group_size=2)
    assert eng.batches == [4, 4, 2, 2]
    assert [ep.group for ep in eps] == [0, 0, 1, 1]
    assert [len(ep.turns) for ep in eps] == [2, 2, 4, 4]
    assert [ep.prediction for ep in eps] == ["936", "936", "300", "300"]


def test_parse_verdict():
    assert parse_verdict("Checking... **The answer is correct**.") == "correct"
    assert parse_verdict("The answer is incorrect") == "wrong"
    assert parse_verdict("so the answer is not correct") == "wrong"
    assert parse_verdict("The answer is correct? No. The answer is wrong.") == "wrong"  # last one wins
    assert parse_verdict("verdict: \\boxed{\\text{correct}}") == "correct"
    assert parse_verdict("The answer is 936") is None and parse_verdict("") is None
    assert parse_verdict("the answer is correctly computed") is None
    assert parse_verdict("936=935;no") is None  # short markers only in the embedded format
    fmt = EmbeddedPAGFormat(None)
    assert fmt.parse_verdict("936=935;no") == "wrong" and fmt.parse_verdict("ok") == "correct"
    assert fmt.parse_verdict("there is no") is None and fmt.parse_verdict("book") is None


def test_chat_prompts(tiny):
    _, tok = tiny  # no chat template: plain user text
    fmt = ChatPAGFormat(tok, attempt_budget=10)
    v = fmt.verify("What is 2+2?", "2+2=4, \\boxed{4}")
    assert v.startswith("What is 2+2?") and "... \\boxed{4}" in v and "2+2=4" not in v
    assert v.rstrip().endswith('"The answer is correct" or "The answer is wrong".')
    r = fmt.revise("What is 2+2?", "\\boxed{5}", "The answer is wrong")
    assert "\\boxed{5}" in r and "The answer is wrong" in r and "\\boxed{}" in r
    assert fmt.parse_verdict("ok") is None


def test_advantages_per_role_turn_hand_computed():
    # one prompt group, three episodes: y1 rewards [1,0,0], v1 [1,1,0], y2 (two revised) [2,-1], v2 (one) [1]
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 2.0, 1.0, 0.0, 0.0, -1.0])
    groups = torch.zeros(9, dtype=torch.long)
    P_, V_ = ROLE_IDS["policy"], ROLE_IDS["verifier"]
    roles = torch.tensor([P_, V_, P_, V_, P_, V_, P_, V_, P_])
    turns = torch.tensor([0, 1, 0, 1, 2, 3, 0, 1, 2])
    adv = pag_advantages(rewards, groups, roles, turns)
    s3 = (1 / 3) ** 0.5  # unbiased std of {1,0,0} and of {1,1,0}
    s2 = 4.5 ** 0.5  # unbiased std of {2,-1}
    expect = [(2 / 3) / s3, (1 / 3) / s3, -(1 / 3) / s3, (1 / 3) / s3, 1.5 / s2, 0.0, -(1 / 3) / s3, -(2 / 3) / s3,
              -1.5 / s2]
    assert torch.allclose(adv, torch.tensor(expect), atol=1e-4)
    # turn-independent: a later turn's reward does not move an earlier turn's advantage
    r2 = rewards.clone()
    r2[4] = 0.0
    adv2 = pag_advantages(r2, groups, roles, turns)
    early = turns < 2
    assert torch.equal(adv2[early], adv[early]) and not torch.equal(adv2, adv)
    # per role: policy rewards do not move verifier advantages
    r3 = rewards.clone()
    r3[roles == P_] += torch.tensor([5.0, -3.0, 2.0, 7.0, 1.0])
    assert torch.equal(pag_advantages(r3, groups, roles, turns)[roles == V_], adv[roles == V_])
    # other baselines; without roles/turns it is GRPO
    by_role = pag_advantages(rewards, groups, roles, turns, group_by="role")
    pol = rewards[roles == P_]
    assert torch.allclose(by_role[roles == P_], (pol - pol.mean()) / (pol.std() + 1e-6))
    assert torch.allclose(pag_advantages(rewards, groups, norm_by_std=False), rewards - rewards.mean())


def test_advantages_verifier_balance_hand_computed():
    # role baseline; policy [1,0]; verifier: 2 turns on right attempts (rewards 1,0), 4 on wrong (1,0,0,1)
    P_, V_ = ROLE_IDS["policy"], ROLE_IDS["verifier"]
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    roles = torch.tensor([P_, P_, V_, V_, V_, V_, V_, V_])
    turns = torch.zeros(8, dtype=torch.long)
    right = torch.tensor([0, 0, 1, 1, 0, 0, 0, 0])
    adv = pag_advantages(rewards, groups, roles, turns, group_by="role", attempt_correct=right, verifier_balance=True)
    # policy turns: GRPO over the role (mean 1/2, std 0.5**0.5). Verifier, n = 6: class "right" (n_c 2, weight
    # 6/4) leave-one-out baselines 0 and 1; class "wrong" (n_c 4, weight 6/8): baselines 1/3, 2/3, 2/3, 1/3
    a_r, a_w = 1.5, 0.75
    expect = [0.5 / 0.5 ** 0.5, -0.5 / 0.5 ** 0.5, a_r * 1, a_r * -1,
              a_w * (1 - 1 / 3), a_w * (0 - 2 / 3), a_w * (0 - 2 / 3), a_w * (1 - 1 / 3)]
    assert torch.allclose(adv, torch.tensor(expect), atol=1e-5)
    # no std scaling of the verifier's turns, whatever norm_by_std (policy turns do follow it)
    nostd = pag_advantages(rewards, groups, roles, turns, group_by="role", attempt_correct=right,
                           verifier_balance=True, norm_by_std=False)
    assert torch.equal(nostd[2:], adv[2:]) and torch.allclose(nostd[:2], torch.tensor([0.5, -0.5]))
    # one class only (all attempts right): no verifier gradient; policy turns as without the balance
    only = pag_advantages(rewards, groups, roles, turns, group_by="role", attempt_correct=torch.ones(8, dtype=torch.long),
                          verifier_balance=True)
    plain = pag_advantages(rewards, groups, roles, turns, group_by="role")
    assert torch.equal(only[2:], torch.zeros(6)) and torch.equal(only[:2], plain[:2])
    with pytest.raises(ValueError):
        pag_advantages(rewards, groups, roles, turns, verifier_balance=True)


def _blind_verdict_gradient(q: tuple[float, float, float], right: torch.Tensor, **kw) -> float:
    """The exact expected gradient, along z_c - z_w (the logits of "correct" and "wrong"), of
    sum_i A_i log pi(v_i) for a verifier that ignores the attempt and says "correct" / "wrong" / nothing
    with probabilities ``q`` (every verdict vector of nonzero probability enumerated), given which judged
    attempts are right (one batch-wide group); no verdict earns 0 in both classes. With two outcomes
    (q_none = 0) it is twice the gradient on the logit of "correct"."""
    import itertools

    n, qt = right.numel(), torch.tensor(q, dtype=torch.float64)
    total = 0.0
    for says in itertools.product([v for v in range(3) if q[v] > 0], repeat=n):
        s = torch.tensor(says)
        r = torch.where(right.bool(), (s == 0).double(), (s == 1).double())
        a = pag_advantages(r, torch.zeros(n, dtype=torch.long), torch.full((n,), ROLE_IDS["verifier"]),
                           torch.ones(n, dtype=torch.long), group_by="role", attempt_correct=right, **kw)
        score = ((s == 0).double() - qt[0]) - ((s == 1).double() - qt[1])  # d log pi / d z_c - d log pi / d z_w
        total += float(qt[s].prod()) * float((a * score).sum())
    return total


@pytest.mark.parametrize("p", [0.2, 0.5, 0.8])
@pytest.mark.parametrize("n_right", [1, 2, 7])
def test_verifier_balance_gives_a_cue_blind_verdict_no_expected_gradient(p, n_right):
    """The point of ``verifier_balance``: however many judged attempts are right (1, 2 or 7 of 9), a
    verdict bias that ignores the attempt gets no gradient in expectation, exactly. Without the balance it
    is pushed towards the majority class; the per-class mean baseline (+ per-class std) this option used
    before issue 38's fix pushed it half as hard as no balance at all (2 right of 9, p = 0.5: -1.11 against
    -2.21; -0.40 against -1.11 without the std scaling)."""
    right = torch.tensor([1] * n_right + [0] * (9 - n_right))
    for norm_by_std in (True, False):
        g = _blind_verdict_gradient((p, 1 - p, 0.0), right, verifier_balance=True, norm_by_std=norm_by_std)
        assert abs(g) < 1e-9, (p, n_right, norm_by_std, g)
    unbalanced = _blind_verdict_gradient((p, 1 - p, 0.0), right, norm_by_std=False) / 2  # on the logit
    majority = 1 if n_right > 9 - n_right else -1  # the direction of the push: towards the larger class
    assert unbalanced * majority > 0.05


@pytest.mark.parametrize("q", [(0.4, 0.2, 0.4), (0.2, 0.4, 0.4), (0.3, 0.1, 0.6), (0.45, 0.45, 0.1)])
def test_balanced_accuracy_drifts_a_blind_verifier_towards_its_commoner_verdict(q):
    """What the balance leaves (docs/apo_pag.md, "PAG on SmolLM2"): it is an unbiased estimate of balanced
    accuracy, and balanced accuracy with a third outcome (no verdict, 0 in both classes) is itself
    (q_c + q_w) / 2 for a blind verifier, whose gradient on z_c - z_w is q_none (q_c - q_w) / 2 a turn:
    rich get richer, whichever class is larger (2 right of 7 here)."""
    right = torch.tensor([1, 1, 0, 0, 0, 0, 0])
    expected = right.numel() * q[2] * (q[0] - q[1]) / 2
    drift = _blind_verdict_gradient(q, right, verifier_balance=True, norm_by_std=False)
    assert drift == pytest.approx(expected, abs=1e-9)


def test_advantages_groups_and_grpo_convention():
    # two prompt groups never share a baseline
    adv = pag_advantages(torch.tensor([1.0, 0.0, 5.0, 5.0]), torch.tensor([0, 0, 1, 1]),
                         torch.zeros(4, dtype=torch.long), torch.zeros(4, dtype=torch.long))
    assert torch.allclose(adv, torch.tensor([0.7071, -0.7071, 0.0, 0.0]), atol=1e-4)
    from satseq.algos.advantages import grpo_advantages

    r, g = torch.tensor([1.0, 0.0, 0.0, 2.0, 1.0]), torch.tensor([0, 0, 0, 1, 1])
    assert torch.equal(pag_advantages(r, g), grpo_advantages(r, g))  # same (rewards, group_ids) convention


def _t(role, idx, answer=None, verdict=None, judged=None, attempt=1):
    info = {"attempt": attempt}
    if role == "verifier":
        info.update(verdict=verdict, judged_turn=judged)
    return Turn(role=role, agent="a", index=idx, prompt_text="", prompt_ids=[], response_ids=[], behaviour_logprobs=[],
                text="", finish_reason="eos", answer=answer, info=info)


def _ep(group, turns):
    pol = [t.answer for t in turns if t.role == "policy"]
    return Episode(problem=Problem(f"q{group}", "1+1", "2"), group=group, turns=turns, prediction=pol[-1],
                   info={"revised": len(pol) > 1, "answer_t1": pol[0], "final_answer": pol[-1]})


def _batch():
    return [
        _ep(0, [_t("policy", 0, "2"), _t("verifier", 1, verdict="correct", judged=0)]),
        _ep(0, [_t("policy", 0, "3"), _t("verifier", 1, verdict="wrong", judged=0),
                _t("policy", 2, "2", attempt=2), _t("verifier", 3, verdict="correct", judged=2, attempt=2)]),
        _ep(1, [_t("policy", 0, "3"), _t("verifier", 1, verdict="correct", judged=0)]),
        _ep(1, [_t("policy", 0, "2"), _t("verifier", 1, verdict=None, judged=0),
                _t("policy", 2, "2", attempt=2), _t("verifier", 3, verdict="wrong", judged=2, attempt=2)]),
    ]


def test_metrics_hand_built_batch():
    m = pag_metrics(_batch())
    assert m["acc_t1"] == 0.5 and m["acc_final"] == 0.75
    # verifier turns (attempt right?, verdict): (R,c) ok, (W,w) ok, (R,c) ok, (W,c) bad, (R,None) bad, (R,w) bad
    assert m["verifier_acc"] == 0.5 and m["verifier_acc_t1"] == 0.5
    assert m["correct_recall"] == 0.5  # right attempts: 4, said correct: 2
    assert m["wrong_recall"] == 0.5  # wrong attempts: 2, said wrong: 1
    assert m["no_verdict_rate"] == pytest.approx(1 / 6)
    assert m["revision_rate"] == 0.5 and m["n_revised"] == 2
    assert m["answer_change_ratio"] == 0.5  # 3 -> 2 changed, 2 -> 2 kept
    assert collapse_warning(m["answer_change_ratio"]) is None
    assert "collapse" in collapse_warning(0.2) and collapse_warning(None) is None
    assert pag_metrics([])["acc_t1"] is None


def test_rewards_and_advantages_on_hand_built_batch():
    eps = _batch()
    assign_pag_rewards(eps, alpha=1.0)
    assert [[t.reward for t in ep.turns] for ep in eps] == [[1, 1], [0, 1, 2, 1], [0, 0], [1, 0, 1, 0]]
    adv = assign_pag_advantages(eps)
    assert adv.shape == (12,) and eps[1].turns[2].info["advantage"] == pytest.approx(0.0)  # y2 alone in group 0
    assert eps[0].turns[0].info["advantage"] == pytest.approx(0.7071, abs=1e-4)


TWO_SHOT_CHECK = ("Q: What is 3 + 4 + 5? Proposed answer: 3 + 4 + 5 = 13. The answer is 13.\nCheck: 3 + 4 = 7. "
                  "7 + 5 = 12. 12 is not 13. The answer is wrong.\n\nQ: {problem} Proposed answer: {attempt}\nCheck:")


def test_a_few_shot_verify_prompt_is_used_as_written(tiny, tmp_path):
    """pag.verify_prompt / pag.revise_prompt: exact text with the attempt (its tail) filled in; braces in a
    problem stay; the verdict is read from the model's 'The answer is wrong' as for the chat instruction."""
    from satseq.config import load_config
    from satseq.errors import ConfigError
    from satseq.registry import get_method

    _, tok = tiny
    fmt = ChatPAGFormat(tok, attempt_budget=12, verify_prompt=TWO_SHOT_CHECK,
                        revise_prompt="Q: {problem}\nEarlier: {attempt}\nA check: {verification}\nA:")
    v = fmt.verify("What is {x} + 2?", "long preamble... 2 + 2 = 4. The answer is 4.")
    assert v.startswith("Q: What is 3 + 4 + 5?") and v.endswith("Q: What is {x} + 2? Proposed answer: ...answer is 4.\nCheck:")
    assert fmt.revise("P", "A", "12 is not 13. The answer is wrong.") == "Q: P\nEarlier: A\nA check: 12 is not 13. The answer is wrong.\nA:"
    assert fmt.parse_verdict(" 2 + 2 = 4. 4 is 4. The answer is correct.") == "correct"
    with pytest.raises(ConfigError, match="pag.revise_prompt.*missing \\{verification\\}"):
        load_config(None, ["method=pag", "pag.revise_prompt='Q: {problem} {attempt}'"])
    cfg = load_config(None, ["method=pag", f"output_dir={tmp_path}", "pag.verify_prompt='Check {problem}: {attempt}'"])
    with pytest.raises(ConfigError, match="^config key 'pag.verify_prompt': for chat models only"):
        get_env("self_verify").prompt_format("embedded", tok, cfg)
    assert get_env("self_verify").prompt_format("chat", tok, cfg).verify("p", "a") == "Check p: a"
