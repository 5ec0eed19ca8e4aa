"""The ``single`` workflow: one agent, one turn, ``group_size`` samples per problem (GRPO, A*-PO)."""
from __future__ import annotations

import torch

from satseq.rewards.extract import extract_answer
from satseq.rollout.streams import episode_streams
from satseq.rollout.types import SamplingParams
from satseq.records import Episode, Problem, Turn
from satseq.workflows.base import check_roles, register_workflow


@register_workflow
class SingleWorkflow:
    name = "single"
    roles = None

    def __init__(self, agents: dict[str, str], prompt_format, sampling: SamplingParams):
        self.agents = check_roles(self.name, None, agents)
        self.role, self.agent = next(iter(self.agents.items()))
        self.fmt = prompt_format
        self.sampling = sampling

    def rollout(self, problems: list[Problem], pool, engine, *, group_size: int = 1,
                generator: torch.Generator | None = None, sampling: SamplingParams | None = None,
                streams: list[torch.Generator] | None = None) -> list[Episode]:
        sampling = sampling or self.sampling
        episodes = [Episode(problem=p, group=g) for g, p in enumerate(problems) for _ in range(group_size)]
        streams = streams if streams is not None else episode_streams(generator, len(episodes))
        texts = [self.fmt.single(ep.problem.problem) for ep in episodes]
        gens = engine.generate(pool.module(self.agent), [self.fmt.encode(t) for t in texts], sampling, streams)
        for ep, text, gen in zip(episodes, texts, gens):
            ans = extract_answer(gen.text)
            ep.turns.append(Turn.from_generation(gen, role=self.role, agent=self.agent, index=0, prompt_text=text,
                                                 answer=ans))
            ep.prediction = ans
        return episodes
