"""Which scorer grades a problem's answers: the registry behind every correctness check.

A problem names its scorer in ``Problem.meta["scorer"]``. A problem without one (every file, benchmark
and embedded task) is graded by ``math``: :func:`~satseq.rewards.grade.is_equivalent` against
``Problem.answer``, exactly as before this registry. Rewards (:mod:`satseq.rewards.turn_rewards`) and
``satseq eval`` (the environments' ``grade``, the prediction lines' votes) ask here.

=================  ===========================================================================
scorer             grades
=================  ===========================================================================
``math``           math-verify equivalence of the extracted answer and ``Problem.answer``
                   (:mod:`satseq.rewards.grade`); the score is 1.0 or 0.0
``reasoning_gym``  the generator's own ``score_answer(answer, entry)``
                   (:func:`satseq.data.reasoning_gym.score_answer`), in [0, 1]
=================  ===========================================================================

**Score, correct and reward.** A scorer gives a score ``s`` in [0, 1]. The answer is ``correct`` when
``s == 1``: reasoning-gym's scorers give 1.0 to a right answer, and their own tests check
``score_answer(entry["answer"], entry) == 1.0``. Below that is partial credit (word_sorting gives 0.2 to
the right words in the wrong order), which is not a right answer for accuracy, pass@k or maj@k. The
turn's outcome reward is the score itself, the task's own reward shaping, and it is recorded in
``Turn.info["score"]`` for problems with a named scorer. For ``math``, ``s = float(correct)``, so every
existing run's rewards are unchanged, bit for bit.

**Votes.** A majority vote groups answers with the scorer's ``same``: ``math``'s is
:func:`~satseq.rewards.grade.is_equivalent`, and reasoning-gym's is equality of the plain answers
(:func:`~satseq.rewards.plain_text.plain_text_answer`, whitespace collapsed). The vote's verdict is the
scorer's verdict on the winning answer.

Register another scorer with :func:`register_scorer` (a :class:`Scorer` whose ``score(answer, problem)``
returns a float in [0, 1]). An unknown name is a one-line :class:`~satseq.errors.ConfigError` listing
the known ones.
"""
from __future__ import annotations

import importlib
import math as _math
import re
from dataclasses import dataclass
from typing import Callable, Optional

from satseq.errors import ConfigError
from satseq.records import Problem
from satseq.rewards.grade import is_equivalent

__all__ = ["DEFAULT_SCORER", "Scorer", "register_scorer", "scorer_names", "get_scorer", "scorer_name",
           "grade", "is_correct"]

#: The scorer of a problem that names none.
DEFAULT_SCORER = "math"


@dataclass(frozen=True)
class Scorer:
    """``score(answer, problem) -> float in [0, 1]`` (``answer``: the extracted final answer or None);
    ``same(a, b)``: whether two answers are one vote."""

    name: str
    score: Callable[[Optional[str], Problem], float]
    same: Callable[[str, str], bool]
    title: str = ""


def _math_score(answer: Optional[str], problem: Problem) -> float:
    return float(answer is not None and is_equivalent(answer, problem.answer))


_WS = re.compile(r"\s+")


def _plain(s: str) -> str:
    from satseq.rewards.plain_text import plain_text_answer

    return _WS.sub(" ", plain_text_answer(str(s))).strip()


def same_plain_text(a: str, b: str) -> bool:
    """Two answers are one vote when their plain texts are equal (whitespace collapsed)."""
    return _plain(a) == _plain(b)


def _reasoning_gym_score(answer: Optional[str], problem: Problem) -> float:
    module = importlib.import_module("satseq.data.reasoning_gym")  # the optional package, imported on use
    return module.score_answer(answer, problem)


_SCORERS: dict[str, Scorer] = {
    DEFAULT_SCORER: Scorer(DEFAULT_SCORER, _math_score, is_equivalent,
                           "math-verify equivalence with the reference answer"),
    "reasoning_gym": Scorer("reasoning_gym", _reasoning_gym_score, same_plain_text,
                            "the reasoning-gym generator's own score_answer"),
}


def register_scorer(scorer: Scorer) -> Scorer:
    """Make ``scorer`` the one ``meta["scorer"] = scorer.name`` selects (a name may not be taken twice)."""
    if scorer.name in _SCORERS and _SCORERS[scorer.name] is not scorer:
        raise ValueError(f"a scorer named {scorer.name!r} is already registered")
    _SCORERS[scorer.name] = scorer
    return scorer


def scorer_names() -> list[str]:
    """Every registered scorer name."""
    return sorted(_SCORERS)


def get_scorer(name: str) -> Scorer:
    """The scorer registered as ``name`` (a one-line ConfigError listing the known names otherwise)."""
    try:
        return _SCORERS[name]
    except (KeyError, TypeError):
        raise ConfigError(f"unknown scorer {name!r} (problem meta 'scorer'): known scorers are "
                          f"{', '.join(scorer_names())}") from None


def scorer_name(problem: Problem) -> str:
    """The name of the scorer that grades ``problem`` (:data:`DEFAULT_SCORER` when it names none)."""
    meta = problem.meta
    return meta.get("scorer", DEFAULT_SCORER) if isinstance(meta, dict) else DEFAULT_SCORER


def grade(answer: Optional[str], problem: Problem) -> tuple[bool, float]:
    """``(correct, score)`` of an extracted final answer to ``problem``: ``correct`` iff ``score == 1``.

    The ``math`` scorer is :func:`~satseq.rewards.grade.is_equivalent`, called exactly as before (the
    score is 1.0 or 0.0). A named scorer's value is clipped to [0, 1], and a non-finite one scores 0.
    """
    name = scorer_name(problem)
    if name == DEFAULT_SCORER:
        ok = answer is not None and is_equivalent(answer, problem.answer)
        return ok, float(ok)
    value = float(get_scorer(name).score(answer, problem))
    value = min(1.0, max(0.0, value)) if _math.isfinite(value) else 0.0
    return value >= 1.0, value


def is_correct(answer: Optional[str], problem: Problem) -> bool:
    """Whether ``answer`` is right for ``problem`` under its scorer (``grade(...)[0]``)."""
    return grade(answer, problem)[0]
