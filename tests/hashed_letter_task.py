"""What the learnability checks share (tests/test_pag_learnability.py, tests/test_mlmt_learnability.py):
problems whose answer is a letter picked by a hash of a random 5-digit number, so that no model can solve
them from the text and only what a check plants in a prompt can help; and a prompt format's encoding and
its reading of the letter an earlier turn answered."""
from __future__ import annotations

import hashlib
import random

from satseq.records import Problem


def hashed_gold(text: str, letters: str) -> str:
    """The answer of ``text``: one of ``letters`` by a hash of it (unlearnable from the text)."""
    return letters[hashlib.sha256(text.encode()).digest()[0] % len(letters)]


def hashed_problems(n: int, seed: int, tag: str, letters: str) -> list[Problem]:
    """``n`` distinct random 5-digit numbers (drawn from ``tag`` and ``seed``) with their hashed letters."""
    rng = random.Random(f"{tag}-{seed}")
    texts = [str(x) for x in rng.sample(range(10000, 100000), n)]
    return [Problem(f"p{i}", t, hashed_gold(t, letters)) for i, t in enumerate(texts)]


class LetterFormat:
    """The shared part of a check task's prompt format: the embedded tokenizer's encoding, and the letter an
    answer shows (``?`` when it gave none of ``letters``)."""

    name = "embedded"
    letters = ""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    @classmethod
    def _shown(cls, text: str | None) -> str:
        from satseq.rewards.extract import extract_answer

        ans = extract_answer(text)
        return ans if ans is not None and len(ans) == 1 and ans in cls.letters else "?"
