"""The majority vote over answers grouped by equivalence: the relay's team prediction and maj@k."""
from __future__ import annotations

from typing import Callable, Literal, Sequence

from satseq.rewards.grade import is_equivalent

Equivalent = Callable[[str, str], bool]


def majority_vote(
    answers: Sequence[str | None],
    equivalent: Equivalent = is_equivalent,
    tie_break: Literal["last", "first"] = "last",
) -> str | None:
    """The most frequent answer, answers grouped by ``equivalent``; None if every answer is None.

    Grouping: answers are scanned in order; each joins the first group whose first member it is
    equivalent to (``equivalent(answer, first_member)``), else starts a new group. ``None``
    answers are not votes, so they never win over a real answer.

    Ties between groups of equal size:

    - ``tie_break="last"`` (SAT-Seq's relay, spec: "ties broken toward the later agent"): the group
      holding the latest answer wins, and its latest answer is returned;
    - ``tie_break="first"`` (maj@k): the group that appeared first wins, and its first answer is
      returned.
    """
    if tie_break not in ("last", "first"):
        raise ValueError(f"majority_vote: tie_break must be 'last' or 'first', got {tie_break!r}")
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
    best = max(groups, key=lambda g: (len(g), -g[0]))
    return answers[best[0]]
