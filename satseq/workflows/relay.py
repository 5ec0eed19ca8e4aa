"""The ``relay`` workflow (SAT-Seq): K agents answer in sequence; the prediction is their vote.

Agent k sees the problem and what agents 1..k-1 answered (their final answers, or their
responses truncated to a budget), and writes y_k. The episode's prediction is the majority vote
of the K extracted answers, grouped by math-verify equivalence, ties broken toward the later
agent. The workflow only builds prompts and decides the next turn; rewards are assigned by
:mod:`satseq.rewards.turn_rewards`, gradients by the trainer.
"""
from __future__ import annotations

from satseq.rewards.voting import majority_vote
from satseq.rewards.extract import extract_answer
from satseq.rewards.grade import is_equivalent
from satseq.records import Episode, Turn
from satseq.workflows.base import EpisodeWorkflow, TurnSampler, register_workflow


@register_workflow
class RelayWorkflow(EpisodeWorkflow):
    """``agents``: role -> agent in turn order (each agent plays the role named after it)."""

    name = "relay"
    roles = None

    def play(self, episodes: list[Episode], turns: TurnSampler) -> None:
        for k, (role, agent) in enumerate(self.agents.items()):
            texts = [self.fmt.relay(ep.problem.problem, [(t.answer, t.text) for t in ep.turns]) for ep in episodes]
            gens = turns.sample(agent, texts)
            for ep, text, gen in zip(episodes, texts, gens):
                ep.turns.append(Turn.from_generation(gen, role=role, agent=agent, index=k, prompt_text=text,
                                                     answer=extract_answer(gen.text)))
        for ep in episodes:
            ep.prediction = majority_vote([t.answer for t in ep.turns], equivalent=is_equivalent, tie_break="last")
