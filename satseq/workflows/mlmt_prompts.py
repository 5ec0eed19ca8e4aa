"""Prompt texts for the MLMT ``coach`` workflow (spec ``mlmt.md``): solve → feedback → refine.

* ``EmbeddedMLMTFormat`` (tiny character model; layouts in :mod:`satseq.data.multiturn`, MLMT's task
  in :mod:`satseq.data.sum_of_three`): the coach sees the attempt's answer, ``0761|tip?|347+289+126=``;
  the refining solver sees the attempt's and the coach's answers, ``0761:0762|347+289+126=``, and
  without the feedback ``0761:____|347+289+126=`` (the prompt of the dependence term's second forward).
* ``ChatMLMTFormat`` (instruction models): the tokenizer's chat template; the coach gets the
  problem and the attempt and is told not to state the final answer outright; the refining solver
  gets the problem, its attempt and the feedback. Long texts are shown by their tails. Or, with
  ``mlmt.coach_prompt`` / ``mlmt.refine_prompt``, exact texts (a few-shot prompt for a small model).

The coach never sees the reference answer.
"""
from __future__ import annotations

from satseq.data import multiturn
from satseq.rewards.extract import extract_answer
from satseq.workflows.prompts import BOXED_INSTRUCTION, ChatFormat, EmbeddedFormat


class EmbeddedMLMTFormat(EmbeddedFormat):
    name = "embedded"

    def coach(self, problem: str, attempt: str) -> str:
        return multiturn.coach_prompt(problem, extract_answer(attempt))

    def refine(self, problem: str, attempt: str, feedback: str | None) -> str:
        """The turn-3 prompt; ``feedback=None`` gives the same prompt without the coach's context."""
        return multiturn.refine_prompt(problem, extract_answer(attempt),
                                       None if feedback is None else extract_answer(feedback),
                                       with_hint=feedback is not None)


class ChatMLMTFormat(ChatFormat):
    def __init__(self, tokenizer, *, use_chat_template: bool = True, attempt_budget: int = 4000,
                 feedback_budget: int = 2000, template: str = "boxed", coach_prompt: str | None = None,
                 refine_prompt: str | None = None):
        super().__init__(tokenizer, use_chat_template=use_chat_template, template=template)
        self.attempt_budget = attempt_budget
        self.feedback_budget = feedback_budget
        self.coach_prompt, self.refine_prompt = coach_prompt, refine_prompt  # mlmt.coach_prompt / refine_prompt

    def coach(self, problem: str, attempt: str) -> str:
        if self.coach_prompt is not None:  # exact text: a few-shot feedback for a base or small model
            return self._fill(self.coach_prompt, problem=problem, attempt=self._tail(attempt, self.attempt_budget))
        return self._wrap(
            f"{problem}\n\nA student wrote this solution:\n\n{self._tail(attempt, self.attempt_budget)}\n\n"
            "You are the student's coach. Point out any mistake and show how to solve the problem, with a "
            "short worked demonstration of the method. Your feedback will be shown to the student.")

    def refine(self, problem: str, attempt: str, feedback: str | None) -> str:
        if self.refine_prompt is not None:  # without the coach's context: {feedback} empty
            return self._fill(self.refine_prompt, problem=problem, attempt=self._tail(attempt, self.attempt_budget),
                              feedback=self._tail(feedback, self.feedback_budget) if feedback is not None else "")
        parts = [f"{problem}\n\nYour previous solution:\n\n{self._tail(attempt, self.attempt_budget)}"]
        if feedback is not None:
            parts.append(f"Feedback from your coach:\n\n{self._tail(feedback, self.feedback_budget)}")
        parts.append(f"Solve the problem again. {BOXED_INSTRUCTION}")
        return self._wrap("\n\n".join(parts))


def make_mlmt_format(kind: str, tokenizer, *, chat_template: str = "auto", template: str = "boxed",
                     coach_prompt: str | None = None, refine_prompt: str | None = None):
    """``"embedded"`` -> :class:`EmbeddedMLMTFormat`; anything else -> :class:`ChatMLMTFormat`."""
    if kind == "embedded":
        return EmbeddedMLMTFormat(tokenizer)
    return ChatMLMTFormat(tokenizer, use_chat_template=chat_template != "never", template=template,
                          coach_prompt=coach_prompt, refine_prompt=refine_prompt)
