"""One solver → checker → reviser episode (:class:`CheckReviseSession`), and its grading.

The turns, each role its own conversation (token for token, :class:`satseq.envs.conversation.Conversation`)::

    solver    problem                                  → an attempt (its answer extracted)
    checker   problem + the attempt                    → a ```python block?  ─yes→ the sandbox runs it, its
              (a conversation of ≤ max_tool_calls + 1 turns)   output a tool message, the checker goes on
                                                       → no block (or the budget spent): its verdict
    reviser   problem + attempt + verdict + the check  → a revised answer     (only if the verdict is not "correct")

PAG's selective revision (spec ``apo_pag.md``; :mod:`satseq.workflows.self_verify`): an explicit
"correct" ends the episode and the prediction is the solver's answer; "wrong" or no verdict sends it to
the reviser, whose answer is the prediction. A checker turn that writes a block once the budget is
spent is its last; its verdict is what it says (usually none). A tool result is recorded in the run's
journal (:mod:`satseq.envs.tool_use.journal`), so a resumed stage replays it.
"""
from __future__ import annotations

from typing import Callable, Optional

from satseq.envs.conversation import Conversation, Message
from satseq.records import Episode, Problem, Turn

SOLVER, CHECKER, REVISER = "solver", "checker", "reviser"
NO_CHECK = "(no program was run)"


def verdict_matches(verdict: Optional[str], attempt_correct: bool) -> bool:
    """A verdict ("correct" / "wrong" / None) is right about an attempt; None never is (PAG's rule)."""
    return verdict == ("correct" if attempt_correct else "wrong")


class CheckReviseSession:
    """``fmt``: the environment's format (:class:`satseq.envs.check_revise.env.CheckReviseFormat`);
    ``run(code) -> text``: the sandboxed program's result; ``budget``: programs the checker may run."""

    def __init__(self, fmt, problem: Problem, *, run: Callable[[str], str], journal, budget: int):
        self.fmt, self.problem, self.run, self.journal, self.budget = fmt, problem, run, journal, budget
        self.stop: Optional[str] = None
        self.phase = SOLVER
        self.solver = Conversation(fmt.conversation, fmt.solver_messages(problem.problem))
        self.checker = self.reviser = None
        self.attempt: Optional[Turn] = None
        self.calls, self.outputs = 0, []
        self.verdict: Optional[str] = None
        self.check_text = ""

    def next_turn(self):
        conv = {SOLVER: self.solver, CHECKER: self.checker, REVISER: self.reviser}.get(self.phase)
        if conv is None:
            return None
        return self.phase, conv.prompt_ids(), conv.prompt_text

    def observe(self, turn: Turn, gen) -> None:
        from satseq.rewards.extract import extract_answer

        if self.phase == SOLVER:
            self.solver.record(gen)
            turn.answer = extract_answer(gen.text)
            self.attempt = turn
            self.checker = Conversation(self.fmt.conversation,
                                        self.fmt.checker_messages(self.problem.problem, gen.text, turn.answer))
            self.phase = CHECKER
        elif self.phase == CHECKER:
            self._check(turn, gen)
        else:
            self.reviser.record(gen)
            turn.answer = extract_answer(gen.text)
            self.phase, self.stop = None, "revised"

    def _check(self, turn: Turn, gen) -> None:
        from satseq.envs.tool_use.journal import call_key
        from satseq.tools.parsers import parse_tool_calls

        self.checker.record(gen)
        blocks = [c for c in parse_tool_calls(gen.text, "python_block") if c.error is None]
        if blocks and self.calls < self.budget:
            codes, results = [], []
            for i, call in enumerate(blocks[:self.budget - self.calls]):
                code = call.arguments["code"]
                key = call_key(gen.prompt_ids, gen.response_ids, i, "python", {"code": code})
                text, _ = self.journal.result(key, lambda c=code: self.run(c))
                codes.append(code)
                results.append(text)
                self.checker.add(Message("tool", text, name="python"))
            self.calls += len(codes)
            self.outputs += results
            turn.info.update(tool_calls=codes, tool_results=results, final=False)
            return
        self.verdict = self.fmt.parse_verdict(gen.text)
        self.check_text = gen.text
        turn.info.update(final=True, verdict=self.verdict, judged_turn=self.attempt.index)
        if self.verdict == "correct":
            self.phase, self.stop = None, "accepted"
            return
        self.reviser = Conversation(self.fmt.conversation, self.fmt.reviser_messages(
            self.problem.problem, self.attempt.text, self.attempt.answer, self.verdict, self.check_text,
            "\n".join(self.outputs) or NO_CHECK))
        self.phase = REVISER

    def finish(self, episode: Episode) -> None:
        revised = [t for t in episode.turns if t.role == REVISER]
        solver = episode.turns[0] if episode.turns else None
        episode.prediction = revised[-1].answer if revised else (solver.answer if solver else None)
        episode.info.update(verdict=self.verdict, tool_calls=self.calls, revised=bool(revised),
                            answer_t1=solver.answer if solver else None)


def grade_check_revise(episodes: list[Episode]) -> None:
    """Correctness per seat (idempotent): the solver's and the reviser's answers under the problem's scorer
    (:func:`satseq.rewards.turn_rewards.grade_episodes`), the checker's last turn right when its verdict
    matches the attempt's correctness (``info["attempt_correct"]``); its tool-calling turns are not
    verdicts (``correct`` False)."""
    from satseq.rewards.turn_rewards import grade_episodes

    grade_episodes(episodes)
    for ep in episodes:
        solver_correct = bool(ep.turns[0].correct) if ep.turns else False
        for t in ep.turns:
            if t.role == CHECKER:
                t.info["attempt_correct"] = solver_correct
                t.correct = bool(t.info.get("final")) and verdict_matches(t.info.get("verdict"), solver_correct)
