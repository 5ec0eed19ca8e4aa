"""The ``self_verify`` workflow (PAG, spec ``apo_pag.md``): one policy solves, verifies, revises.

One agent (its adapter / parameters) plays the two PAG roles with different prompts: ``agents``
maps ``"policy"`` and ``"verifier"`` to it (they may also name two agents). Each turn records
``Turn.role`` in {"policy", "verifier"} and ``Turn.agent``, the agent that played it.
Episode, with ``max_policy_turns = M`` (default 2)::

    y1 (solve) -> v1 (verify y1) -> [verdict != "correct" and 1 < M] y2 (revise) -> v2 -> ... -> y_M -> v_M

* Selective revision: an explicit "correct" verdict ends the episode; "wrong" and no verdict
  (unparseable, see :func:`satseq.workflows.pag_prompts.parse_verdict`) lead to a revision.
* Turn limit: at most M policy turns. The last policy turn is verified too (``verify_last=True``,
  the default: the spec's "y2 -> v3"): its verdict changes nothing in the episode but gives the
  verifier a training turn on revised attempts. ``verify_last=False`` ends right after y_M.
* The prediction is the last policy turn's answer. ``ep.info``: ``revised`` (any y_t, t >= 2),
  ``answer_t1``, ``final_answer``, ``policy_turns``, ``verdicts`` (one per verifier turn) and
  ``stop`` ("accepted": the last verdict is "correct"; else "turn_limit").
* Per-turn ``info``: ``attempt`` (1-based number of the attempt the turn makes or
  judges), and on verifier turns ``verdict`` and ``judged_turn`` (index of the judged policy turn).
  Verifier turns have ``answer = None`` (their verdict is not an answer to the problem).

All active episodes advance in lockstep, one batched ``engine.generate`` per turn; episodes drop
out when they stop. Rewards: :mod:`satseq.envs.self_verify.rewards`; gradients: the trainer.
"""
from __future__ import annotations

from satseq.rewards.extract import extract_answer
from satseq.rollout.types import SamplingParams
from satseq.records import Episode, Turn
from satseq.workflows.base import EpisodeWorkflow, TurnSampler, register_workflow

POLICY, VERIFIER = "policy", "verifier"


@register_workflow
class SelfVerifyWorkflow(EpisodeWorkflow):
    name = "self_verify"
    roles = (POLICY, VERIFIER)

    def __init__(self, agents: dict[str, str], prompt_format, sampling: SamplingParams, max_policy_turns: int = 2, *,
                 verify_last: bool = True):
        if max_policy_turns < 1:
            raise ValueError(f"max_policy_turns must be >= 1, got {max_policy_turns}")
        super().__init__(agents, prompt_format, sampling)
        self.max_policy_turns = int(max_policy_turns)
        self.verify_last = verify_last

    def _turn(self, ep: Episode, text: str, gen, role: str, attempt: int, answer, **info) -> Turn:
        t = Turn.from_generation(gen, role=role, agent=self.agents[role], index=len(ep.turns), prompt_text=text,
                                 answer=answer, info={"attempt": attempt, **info})
        ep.turns.append(t)
        return t

    def play(self, episodes: list[Episode], turns: TurnSampler) -> None:
        last_policy: dict[int, Turn] = {}
        last_verify: dict[int, Turn] = {}
        active = list(range(len(episodes)))
        attempt = 0
        while active:
            attempt += 1
            # policy turn: solve (attempt 1) or revise (later attempts)
            if attempt == 1:
                texts = [self.fmt.single(episodes[i].problem.problem) for i in active]
            else:
                texts = [self.fmt.revise(episodes[i].problem.problem, last_policy[i].text, last_verify[i].text)
                         for i in active]
            gens = turns.sample(self.agents[POLICY], texts, active)
            for i, text, gen in zip(active, texts, gens):
                last_policy[i] = self._turn(episodes[i], text, gen, POLICY, attempt, extract_answer(gen.text))
            at_limit = attempt >= self.max_policy_turns
            if at_limit and not self.verify_last:
                break
            # verifier turn: judge the attempt just made
            texts = [self.fmt.verify(episodes[i].problem.problem, last_policy[i].text) for i in active]
            gens = turns.sample(self.agents[VERIFIER], texts, active)
            for i, text, gen in zip(active, texts, gens):
                last_verify[i] = self._turn(episodes[i], text, gen, VERIFIER, attempt, None,
                                            verdict=self.fmt.parse_verdict(gen.text),
                                            judged_turn=last_policy[i].index)
            if at_limit:
                break
            active = [i for i in active if last_verify[i].info["verdict"] != "correct"]
        for i, ep in enumerate(episodes):
            policy = ep.turns_of(POLICY)
            verdicts = [t.info["verdict"] for t in ep.turns_of(VERIFIER)]
            ep.prediction = policy[-1].answer
            accepted = bool(verdicts) and verdicts[-1] == "correct"
            ep.info.update(revised=len(policy) > 1, answer_t1=policy[0].answer, final_answer=ep.prediction,
                           policy_turns=len(policy), verdicts=verdicts,
                           stop="accepted" if accepted else "turn_limit")
