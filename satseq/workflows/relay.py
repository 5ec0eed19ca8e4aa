"""The ``relay`` workflow (SAT-Seq): K agents answer in sequence; the prediction is their vote.

Agent k sees the problem and what agents 1..k-1 answered (their final answers, or their
responses truncated to a budget), and writes y_k. The episode's prediction is the majority vote
of the K extracted answers, grouped by math-verify equivalence, ties broken toward the later
agent. The workflow only builds prompts and decides the next turn; rewards are assigned by
:mod:`satseq.rewards.turn_rewards`, gradients by the trainer.
"""
from __future__ import annotations

import torch

from satseq.rewards.voting import majority_vote
from satseq.rewards.extract import extract_answer
from satseq.rewards.grade import is_equivalent
from satseq.rollout.streams import episode_streams
from satseq.rollout.types import SamplingParams
from satseq.records import Episode, Problem, Turn
from satseq.workflows.base import check_roles, register_workflow


@register_workflow
class RelayWorkflow:
    name = "relay"
    roles = None

    def __init__(self, agents: dict[str, str], prompt_format, sampling: SamplingParams):
        """``agents``: role -> agent in turn order (each agent plays the role named after it)."""
        self.agents = check_roles(self.name, None, agents)
        self.fmt = prompt_format
        self.sampling = sampling

    def rollout(self, problems: list[Problem], pool, engine, *, group_size: int = 1,
                generator: torch.Generator | None = None, sampling: SamplingParams | None = None,
                streams: list[torch.Generator] | None = None) -> list[Episode]:
        sampling = sampling or self.sampling
        episodes = [Episode(problem=p, group=g) for g, p in enumerate(problems) for _ in range(group_size)]
        streams = streams if streams is not None else episode_streams(generator, len(episodes))
        for k, (role, agent) in enumerate(self.agents.items()):
            texts = [self.fmt.relay(ep.problem.problem, [(t.answer, t.text) for t in ep.turns]) for ep in episodes]
            prompt_ids = [self.fmt.encode(t) for t in texts]
            gens = engine.generate(pool.module(agent), prompt_ids, sampling, streams)
            for ep, text, gen in zip(episodes, texts, gens):
                ep.turns.append(Turn.from_generation(gen, role=role, agent=agent, index=k, prompt_text=text,
                                                     answer=extract_answer(gen.text)))
        for ep in episodes:
            ep.prediction = majority_vote([t.answer for t in ep.turns], equivalent=is_equivalent, tie_break="last")
        return episodes
