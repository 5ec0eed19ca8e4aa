"""The ``single`` workflow: one agent, one turn, ``group_size`` samples per problem (GRPO, A*-PO)."""
from __future__ import annotations

from satseq.rewards.extract import extract_answer
from satseq.rollout.types import SamplingParams
from satseq.records import Episode, Turn
from satseq.workflows.base import EpisodeWorkflow, TurnSampler, register_workflow


@register_workflow
class SingleWorkflow(EpisodeWorkflow):
    name = "single"
    roles = None

    def __init__(self, agents: dict[str, str], prompt_format, sampling: SamplingParams):
        super().__init__(agents, prompt_format, sampling)
        self.role, self.agent = next(iter(self.agents.items()))

    def play(self, episodes: list[Episode], turns: TurnSampler) -> None:
        texts = [self.fmt.single(ep.problem.problem) for ep in episodes]
        gens = turns.sample(self.agent, texts)
        for ep, text, gen in zip(episodes, texts, gens):
            ans = extract_answer(gen.text)
            ep.turns.append(Turn.from_generation(gen, role=self.role, agent=self.agent, index=0, prompt_text=text,
                                                 answer=ans))
            ep.prediction = ans
