"""The ``relay`` workflow (SAT-Seq): K agents answer in sequence; the prediction is their vote.

Agent k sees the problem and what agents 1..k-1 answered (their final answers, or their
responses truncated to a budget), and writes y_k. The episode's prediction is the majority vote
of the K extracted answers, grouped by math-verify equivalence, ties broken toward the later
agent. The workflow only builds prompts and decides the next turn; rewards are assigned by
:mod:`satseq.rewards.turn_rewards`, gradients by the trainer.
"""
from __future__ import annotations

import torch

from satseq.eval.metrics import majority_vote
from satseq.rewards.extract import extract_answer
from satseq.rewards.grade import is_equivalent
from satseq.rollout.types import SamplingParams
from satseq.workflows.episode import Episode, Problem, Turn


class RelayWorkflow:
    name = "relay"

    def __init__(self, agent_names: list[str], prompt_format, sampling: SamplingParams):
        self.agents = list(agent_names)
        self.fmt = prompt_format
        self.sampling = sampling

    def rollout(self, problems: list[Problem], pool, engine, *, group_size: int = 1,
                generator: torch.Generator | None = None, sampling: SamplingParams | None = None) -> list[Episode]:
        sampling = sampling or self.sampling
        episodes = [Episode(problem=p, group=g) for g, p in enumerate(problems) for _ in range(group_size)]
        for k, agent in enumerate(self.agents):
            texts = [self.fmt.relay(ep.problem.problem, [(t.answer, t.text) for t in ep.turns]) for ep in episodes]
            prompt_ids = [self.fmt.encode(t) for t in texts]
            gens = engine.generate(pool.module(agent), prompt_ids, sampling, generator)
            for ep, text, gen in zip(episodes, texts, gens):
                ep.turns.append(Turn(role=agent, index=k, prompt_text=text, prompt_ids=gen.prompt_ids,
                                     response_ids=gen.response_ids, behaviour_logprobs=gen.logprobs,
                                     text=gen.text, finish_reason=gen.finish_reason,
                                     answer=extract_answer(gen.text)))
        for ep in episodes:
            ep.prediction = majority_vote([t.answer for t in ep.turns], equivalent=is_equivalent, tie_break="last")
        return episodes
