"""Turn logic of the relay and single workflows on scripted responses, and per-turn rewards."""
from satseq.models.agents import AgentPool
from satseq.rewards.turn_rewards import assign_outcome_rewards, assign_relay_rewards
from satseq.rollout.types import SamplingParams
from satseq.records import Problem
from satseq.workflows.prompts import EmbeddedFormat
from satseq.workflows.relay import RelayWorkflow
from satseq.workflows.single import SingleWorkflow
from tests.conftest import ScriptedEngine

AGENTS = ["agent_1", "agent_2", "agent_3"]


def _pool(tiny):
    model, tok = tiny
    return AgentPool.full(AGENTS, [model] * 3, tok)


def test_relay_shows_earlier_answers_and_votes_toward_later_agent(tiny):
    _, tok = tiny
    answers = {0: "\\boxed{936}", 1: "\\boxed{926}", 2: "\\boxed{926}"}

    def script(prompt):  # the number of earlier answers shown tells the turn
        return answers[2 - prompt.count("____")]

    eng = ScriptedEngine(tok, script)
    wf = RelayWorkflow(AGENTS, EmbeddedFormat(tok), SamplingParams())
    eps = wf.rollout([Problem("p0", "347+589", "936")], _pool(tiny), eng, group_size=2)
    assert len(eps) == 2 and all(len(ep.turns) == 3 for ep in eps)
    assert eng.calls[:2] == ["____|____|347+589="] * 2
    assert eng.calls[2:4] == ["0936|____|347+589="] * 2
    assert eng.calls[4:6] == ["0936|0926|347+589="] * 2
    ep = eps[0]
    assert [t.role for t in ep.turns] == AGENTS and [t.answer for t in ep.turns] == ["936", "926", "926"]
    assert ep.prediction == "926"  # 2 of 3
    assign_relay_rewards(eps, own=1.0, team=1.0)
    assert [t.reward for t in ep.turns] == [1.0, 0.0, 0.0]  # team reward 0: the vote is wrong
    assert ep.prediction_correct is False


def test_relay_tie_goes_to_later_agent_and_team_reward_on_last_turn(tiny):
    _, tok = tiny
    answers = {0: "\\boxed{1}", 1: "no answer", 2: "\\boxed{936}"}
    eng = ScriptedEngine(tok, lambda p: answers[2 - p.count("____")])
    wf = RelayWorkflow(AGENTS, EmbeddedFormat(tok), SamplingParams())
    eps = wf.rollout([Problem("p0", "347+589", "936")], _pool(tiny), eng)
    assert eng.calls[1] == "0001|____|347+589=" and eng.calls[2] == "0001|????|347+589="
    assert eps[0].prediction == "936"
    assign_relay_rewards(eps, own=0.5, team=2.0)
    assert [t.reward for t in eps[0].turns] == [0.0, 0.0, 0.5 + 2.0]


def test_custom_reward_replaces_correctness(tiny):
    _, tok = tiny
    eng = ScriptedEngine(tok, lambda p: "\\boxed{7}")
    wf = RelayWorkflow(AGENTS, EmbeddedFormat(tok), SamplingParams())
    eps = wf.rollout([Problem("p0", "3+4", "7")], _pool(tiny), eng)
    assign_relay_rewards(eps, own=1.0, team=0.0, custom=lambda prompt, response, answer: len(prompt) / 100)
    assert [t.reward for t in eps[0].turns] == [0.14, 0.14, 0.14]  # fixed-length relay prompts


def test_single_workflow_groups_and_outcome_reward(tiny):
    _, tok = tiny
    replies = iter(["\\boxed{7}", "\\boxed{8}", "\\boxed{9}", "\\boxed{9}"])
    eng = ScriptedEngine(tok, lambda p: next(replies))
    wf = SingleWorkflow("agent_1", EmbeddedFormat(tok), SamplingParams())
    eps = wf.rollout([Problem("a", "3+4", "7"), Problem("b", "4+5", "9")], _pool(tiny), eng, group_size=2)
    assert [ep.group for ep in eps] == [0, 0, 1, 1]
    assign_outcome_rewards(eps)
    assert [ep.turns[0].reward for ep in eps] == [1.0, 0.0, 1.0, 1.0]
