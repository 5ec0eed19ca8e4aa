"""The ``coach`` workflow (MLMT-RL, spec ``mlmt.md``): solve → feedback → refine.

Turn 0 (the seed's turn 1): the solver answers x → z. Turn 1: the coach sees x and z and writes
feedback / a demonstration g (never the reference answer). Turn 2: the solver sees x, z, g → ŷ.
``Turn.role`` is the role (``"solver"`` / ``"coach"``); ``Turn.agent`` the pool agent that played it
(the same agent for both roles when weights are shared). The refine turn also records
``info["prompt_ids_without_feedback"]``: the same prompt without g, for the dependence term
``dep(g) = [log p(ŷ|x,z,g) − log p(ŷ|x,z)] / |ŷ|`` computed by the updater.

``ep.prediction`` is ŷ's answer; ``ep.info``: ``answer_t1`` and ``answer_t3``. All episodes advance
in lockstep: one batched ``engine.generate`` per turn.
"""
from __future__ import annotations

import torch

from satseq.rewards.extract import extract_answer
from satseq.rollout.streams import episode_streams
from satseq.rollout.types import SamplingParams
from satseq.records import Episode, Problem, Turn
from satseq.workflows.base import check_roles, register_workflow

SOLVER, COACH = "solver", "coach"


@register_workflow
class CoachWorkflow:
    name = "coach"
    roles = (SOLVER, COACH)

    def __init__(self, agents: dict[str, str], prompt_format, sampling: SamplingParams):
        """``agents`` maps each role (``solver``, ``coach``) to the pool agent that plays it."""
        self.agents = check_roles(self.name, self.roles, agents)
        self.fmt = prompt_format
        self.sampling = sampling

    def _turns(self, episodes, texts, role, pool, engine, sampling, generator, extra=None):
        ids = [self.fmt.encode(t) for t in texts]
        gens = engine.generate(pool.module(self.agents[role]), ids, sampling, generator)
        for k, (ep, text, gen) in enumerate(zip(episodes, texts, gens)):
            info = {"turn": len(ep.turns) + 1, **(extra[k] if extra is not None else {})}
            ep.turns.append(Turn.from_generation(gen, role=role, agent=self.agents[role], index=len(ep.turns),
                                                 prompt_text=text, answer=extract_answer(gen.text), info=info))

    def rollout(self, problems: list[Problem], pool, engine, *, group_size: int = 1,
                generator: torch.Generator | None = None, sampling: SamplingParams | None = None,
                streams: list[torch.Generator] | None = None) -> list[Episode]:
        sampling = sampling or self.sampling
        eps = [Episode(problem=p, group=g) for g, p in enumerate(problems) for _ in range(group_size)]
        streams = streams if streams is not None else episode_streams(generator, len(eps))
        self._turns(eps, [self.fmt.single(ep.problem.problem) for ep in eps], SOLVER, pool, engine, sampling,
                    streams)
        self._turns(eps, [self.fmt.coach(ep.problem.problem, ep.turns[0].text) for ep in eps], COACH, pool, engine,
                    sampling, streams)
        without = [{"prompt_ids_without_feedback": self.fmt.encode(
            self.fmt.refine(ep.problem.problem, ep.turns[0].text, None))} for ep in eps]
        self._turns(eps, [self.fmt.refine(ep.problem.problem, ep.turns[0].text, ep.turns[1].text) for ep in eps],
                    SOLVER, pool, engine, sampling, streams, extra=without)
        for ep in eps:
            ep.prediction = ep.turns[2].answer
            ep.info.update(answer_t1=ep.turns[0].answer, answer_t3=ep.turns[2].answer)
        return eps
