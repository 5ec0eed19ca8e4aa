"""The ``single`` workflow: one agent, one turn, ``group_size`` samples per problem (GRPO, A*-PO)."""
from __future__ import annotations

import torch

from satseq.rewards.extract import extract_answer
from satseq.rollout.types import SamplingParams
from satseq.workflows.episode import Episode, Problem, Turn


class SingleWorkflow:
    name = "single"

    def __init__(self, agent: str, prompt_format, sampling: SamplingParams):
        self.agent = agent
        self.fmt = prompt_format
        self.sampling = sampling

    def rollout(self, problems: list[Problem], pool, engine, *, group_size: int = 1,
                generator: torch.Generator | None = None, sampling: SamplingParams | None = None) -> list[Episode]:
        sampling = sampling or self.sampling
        episodes = [Episode(problem=p, group=g) for g, p in enumerate(problems) for _ in range(group_size)]
        texts = [self.fmt.single(ep.problem.problem) for ep in episodes]
        gens = engine.generate(pool.module(self.agent), [self.fmt.encode(t) for t in texts], sampling, generator)
        for ep, text, gen in zip(episodes, texts, gens):
            ans = extract_answer(gen.text)
            ep.turns.append(Turn(role=self.agent, index=0, prompt_text=text, prompt_ids=gen.prompt_ids,
                                 response_ids=gen.response_ids, behaviour_logprobs=gen.logprobs, text=gen.text,
                                 finish_reason=gen.finish_reason, answer=ans))
            ep.prediction = ans
        return episodes
