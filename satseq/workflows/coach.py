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

from satseq.rewards.extract import extract_answer
from satseq.records import Episode, Turn
from satseq.workflows.base import EpisodeWorkflow, TurnSampler, register_workflow

SOLVER, COACH = "solver", "coach"


@register_workflow
class CoachWorkflow(EpisodeWorkflow):
    """``agents`` maps each role (``solver``, ``coach``) to the pool agent that plays it."""

    name = "coach"
    roles = (SOLVER, COACH)

    def _turns(self, episodes, texts, role, turns: TurnSampler, extra=None):
        gens = turns.sample(self.agents[role], texts)
        for k, (ep, text, gen) in enumerate(zip(episodes, texts, gens)):
            info = {"turn": len(ep.turns) + 1, **(extra[k] if extra is not None else {})}
            ep.turns.append(Turn.from_generation(gen, role=role, agent=self.agents[role], index=len(ep.turns),
                                                 prompt_text=text, answer=extract_answer(gen.text), info=info))

    def play(self, eps: list[Episode], turns: TurnSampler) -> None:
        self._turns(eps, [self.fmt.single(ep.problem.problem) for ep in eps], SOLVER, turns)
        self._turns(eps, [self.fmt.coach(ep.problem.problem, ep.turns[0].text) for ep in eps], COACH, turns)
        without = [{"prompt_ids_without_feedback": self.fmt.encode(
            self.fmt.refine(ep.problem.problem, ep.turns[0].text, None))} for ep in eps]
        self._turns(eps, [self.fmt.refine(ep.problem.problem, ep.turns[0].text, ep.turns[1].text) for ep in eps],
                    SOLVER, turns, extra=without)
        for ep in eps:
            ep.prediction = ep.turns[2].answer
            ep.info.update(answer_t1=ep.turns[0].answer, answer_t3=ep.turns[2].answer)
