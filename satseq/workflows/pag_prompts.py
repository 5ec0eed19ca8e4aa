"""Prompt texts and verdict parsing for the PAG ``self_verify`` workflow (spec ``apo_pag.md``).

One policy plays two roles with different prompts: solve (the usual ``single`` prompt), verify
(problem + attempt; the response ends with "The answer is correct" / "The answer is wrong") and
revise (problem + attempt + verification). Two formats, extending the ones of
:mod:`satseq.workflows.prompts`:

* ``EmbeddedPAGFormat`` (tiny character model, fixed-length prompts): the attempt is shown as its
  4-character answer in the first slot, the second slot tells the turn:
  ``____|____|347+589=`` solve, ``0935|chk?|347+589=`` verify, ``0935|no__|347+589=`` revise
  after a "wrong" verdict (``????`` after no verdict). Its short verdict vocabulary is a final
  ``ok`` / ``no`` after punctuation (e.g. ``936=935;no``); the full phrases are accepted as well.
* ``ChatPAGFormat`` (instruction models): the tokenizer's chat template, the attempt and the
  verification shown as text (their tails, up to a character budget).

Verdict parsing (:func:`parse_verdict`): the LAST verdict statement in the response wins —
"the answer is correct/right" -> ``"correct"``; "the answer is wrong/incorrect/not correct" ->
``"wrong"`` (case-insensitive, markdown emphasis allowed), also ``\\boxed{correct}`` /
``\\boxed{wrong}``. Nothing recognizable -> ``None`` ("no verdict"); the workflow then revises
(only an explicit "correct" stops the episode) and the verifier turn earns reward 0.
"""
from __future__ import annotations

import re

from satseq.data import multiturn
from satseq.rewards.extract import extract_answer
from satseq.workflows.prompts import BOXED_INSTRUCTION, ChatFormat, EmbeddedFormat

VERDICT_CORRECT = "The answer is correct"
VERDICT_WRONG = "The answer is wrong"

_PHRASE_RE = re.compile(
    r"the\s+(?:final\s+)?answer\s+is\s*[*_\"'`]*\s*(?P<v>not\s+correct|incorrect|correct|right|wrong)\b",
    re.IGNORECASE,
)
_BOXED_RE = re.compile(r"\\boxed\s*\{\s*(?:\\text\s*\{\s*)?(?P<v>incorrect|correct|wrong)\b", re.IGNORECASE)
# embedded: a final "ok" / "no", alone or after punctuation ("936=935;no"; not "there is no")
_SHORT_RE = re.compile(r"(?:^|(?<=[^A-Za-z0-9\s]))(?P<v>ok|no)[\s.!]*$")


def _label(word: str) -> str:
    w = " ".join(word.lower().split())
    return "correct" if w in ("correct", "right", "ok") else "wrong"


def parse_verdict(text: str | None, *, short_markers: bool = False) -> str | None:
    """``"correct"``, ``"wrong"`` or ``None`` (no verdict): the last verdict statement in ``text``.

    With ``short_markers`` a response ending in ``ok`` / ``no`` that is the whole response or follows
    punctuation (``936=935;no``) also counts.
    """
    if not text:
        return None
    best: tuple[int, str] | None = None
    for rx in (_PHRASE_RE, _BOXED_RE) + ((_SHORT_RE,) if short_markers else ()):
        for m in rx.finditer(text):
            if best is None or m.start() > best[0]:
                best = (m.start(), _label(m.group("v")))
    return None if best is None else best[1]


class EmbeddedPAGFormat(EmbeddedFormat):
    """Fixed-length prompts for the built-in arithmetic task (:mod:`satseq.data.multiturn`)."""

    name = "embedded"
    VERIFY_SLOT = multiturn.VERIFY_SLOT
    REVISE_SLOT = multiturn.REVISE_SLOTS

    def verify(self, problem: str, attempt: str) -> str:
        return multiturn.verify_prompt(problem, extract_answer(attempt))

    def revise(self, problem: str, attempt: str, verification: str) -> str:
        return multiturn.revise_prompt(problem, extract_answer(attempt), self.parse_verdict(verification))

    def parse_verdict(self, text: str | None) -> str | None:
        return parse_verdict(text, short_markers=True)


class ChatPAGFormat(ChatFormat):
    """Chat-template prompts; attempts and verifications are shown by their last ``*_budget`` characters."""

    def __init__(self, tokenizer, *, use_chat_template: bool = True, attempt_budget: int = 4000,
                 verification_budget: int = 2000, template: str = "boxed", verify_prompt: str | None = None,
                 revise_prompt: str | None = None):
        super().__init__(tokenizer, use_chat_template=use_chat_template, template=template)
        self.attempt_budget = attempt_budget
        self.verification_budget = verification_budget
        self.verify_prompt, self.revise_prompt = verify_prompt, revise_prompt  # pag.verify_prompt / revise_prompt

    def verify(self, problem: str, attempt: str) -> str:
        if self.verify_prompt is not None:  # exact text: a few-shot check for a base or small model
            return self._fill(self.verify_prompt, problem=problem, attempt=self._tail(attempt, self.attempt_budget))
        return self._wrap(
            f"{problem}\n\nHere is a proposed solution:\n\n{self._tail(attempt, self.attempt_budget)}\n\n"
            "Check this solution step by step and decide whether its final answer is correct. "
            f'End your response with exactly "{VERDICT_CORRECT}" or "{VERDICT_WRONG}".')

    def revise(self, problem: str, attempt: str, verification: str) -> str:
        if self.revise_prompt is not None:
            return self._fill(self.revise_prompt, problem=problem, attempt=self._tail(attempt, self.attempt_budget),
                              verification=self._tail(verification, self.verification_budget))
        return self._wrap(
            f"{problem}\n\nHere is your previous solution:\n\n{self._tail(attempt, self.attempt_budget)}\n\n"
            f"A check of that solution says:\n\n{self._tail(verification, self.verification_budget)}\n\n"
            f"Solve the problem again, correcting any mistakes. {BOXED_INSTRUCTION}")

    def parse_verdict(self, text: str | None) -> str | None:
        return parse_verdict(text)


def make_pag_format(kind: str, tokenizer, *, chat_template: str = "auto", attempt_budget: int = 4000,
                    verification_budget: int = 2000, template: str = "boxed", verify_prompt: str | None = None,
                    revise_prompt: str | None = None):
    """``"embedded"`` -> :class:`EmbeddedPAGFormat`; anything else -> :class:`ChatPAGFormat`."""
    if kind == "embedded":
        return EmbeddedPAGFormat(tokenizer)
    return ChatPAGFormat(tokenizer, use_chat_template=chat_template != "never", attempt_budget=attempt_budget,
                         verification_budget=verification_budget, template=template, verify_prompt=verify_prompt,
                         revise_prompt=revise_prompt)
