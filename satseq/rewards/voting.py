"""The majority vote over answers grouped by equivalence: the relay's team prediction and maj@k."""
from __future__ import annotations

import hashlib
import json
from typing import Any, Callable, Literal, Sequence

import numpy as np

from satseq.rewards.grade import is_equivalent

Equivalent = Callable[[str, str], bool]
TieBreak = Literal["last", "first", "seeded"]


def tie_generator(seed: int, problem_id: Any, k: int) -> np.random.Generator:
    """The stream that breaks one problem's ties in a vote of ``k``: ``numpy`` PCG64 seeded with
    ``SeedSequence([seed, k, h])``, ``h`` the first 8 bytes of SHA-256 of the problem's canonical key
    (``json.dumps(problem_id, sort_keys=True, default=str)``, the key :func:`satseq.eval.predictions_io.problem_key`
    dedupes on). The same run seed, problem and k always draw the same; another seed or problem draws
    independently, so over problems a two-way tie goes either way about half the time."""
    key = json.dumps(problem_id, sort_keys=True, default=str).encode("utf-8")
    h = int.from_bytes(hashlib.sha256(key).digest()[:8], "little")
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(k), h]))


def majority_vote(
    answers: Sequence[str | None],
    equivalent: Equivalent = is_equivalent,
    tie_break: TieBreak = "last",
    generator: np.random.Generator | None = None,
) -> str | None:
    """The most frequent answer, answers grouped by ``equivalent``; None if every answer is None.

    Grouping: answers are scanned in order; each joins the first group whose first member it is
    equivalent to (``equivalent(answer, first_member)``), else starts a new group. ``None``
    answers are not votes, so they never win over a real answer.

    Ties between groups of equal size:

    - ``tie_break="last"`` (SAT-Seq's relay, spec: "ties broken toward the later agent"): the group
      holding the latest answer wins, and its latest answer is returned;
    - ``tie_break="first"`` (maj@k of an odd k): the group that appeared first wins, and its first answer
      is returned;
    - ``tie_break="seeded"`` (maj@k of an even k, where two different answers are always a tie): one of
      the tied groups, drawn uniformly by ``generator`` (:func:`tie_generator`; one draw, only when
      there is a tie), and its first answer is returned.
    """
    if tie_break not in ("last", "first", "seeded"):
        raise ValueError(f"majority_vote: tie_break must be 'last', 'first' or 'seeded', got {tie_break!r}")
    if tie_break == "seeded" and generator is None:
        raise ValueError("majority_vote: tie_break='seeded' needs a generator (tie_generator(seed, problem_id, k))")
    groups: list[list[int]] = []  # indices into answers
    for i, a in enumerate(answers):
        if a is None:
            continue
        for g in groups:
            if equivalent(a, answers[g[0]]):  # type: ignore[arg-type]
                g.append(i)
                break
        else:
            groups.append([i])
    if not groups:
        return None
    if tie_break == "last":
        best = max(groups, key=lambda g: (len(g), g[-1]))
        return answers[best[-1]]
    if tie_break == "seeded":
        top = max(len(g) for g in groups)
        tied = [g for g in groups if len(g) == top]
        best = tied[int(generator.integers(len(tied)))] if len(tied) > 1 else tied[0]  # type: ignore[union-attr]
        return answers[best[0]]
    best = max(groups, key=lambda g: (len(g), -g[0]))
    return answers[best[0]]
