"""The embedded synthetic task: 3-digit addition, with a warm-start (SFT) corpus.

Why this task (see docs/embedded_default.md and the measured notes): RL on a tiny model selects
among behaviours the warm start already samples; it does not create a skill. So the SFT corpus
mixes two styles with probability 1/2 each:

* careful — column by column with explicit carries, ``7+9+0=16,4+8+1=13,3+5+1=09;\\boxed{936}``,
  which a 2M-parameter model learns to execute correctly most of the time;
* hasty — the boxed answer directly, ``\\boxed{936}``, which it cannot compute at this size.

The first generated character decides the style, so the warm start is right roughly half of the
time (pass@1 ≈ 0.5, pass@8 ≈ 1): exactly the regime where RL raises pass@1 toward pass@k.

Prompts have a fixed length per turn (answers of earlier agents are shown as 4 characters, before
the problem), so that batches need no padding on the embedded model.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

from satseq.records import Probe, Problem

PREV_WIDTH = 4  # characters used to show one earlier agent's answer in a relay prompt


def careful_solution(a: int, b: int) -> str:
    """Column-by-column addition from the units, each column ``x+y+carry=two digits``."""
    cols, total = column_chain(a, b)
    return cols + ";" + boxed(total)


def column_chain(a: int, b: int) -> tuple[str, str]:
    """(``7+9+0=16,4+8+1=13,3+5+1=09``, ``"936"``): the columns of :func:`careful_solution` and the sum."""
    da, db = f"{a:03d}"[::-1], f"{b:03d}"[::-1]
    carry, cols, digits = 0, [], []
    for x, y in zip(da, db):
        s = int(x) + int(y) + carry
        cols.append(f"{x}+{y}+{carry}={s:02d}")
        digits.append(s % 10)
        carry = s // 10
    total = (str(carry) if carry else "") + "".join(str(d) for d in reversed(digits))
    assert int(total) == a + b
    return ",".join(cols), total


def boxed(ans: str) -> str:
    return "\\boxed{" + ans + "}"


def render_previous(answer: str | None) -> str:
    """An earlier agent's answer as exactly ``PREV_WIDTH`` characters (``????`` when unusable)."""
    if answer is None or not answer.isdigit() or len(answer) > PREV_WIDTH:
        return "?" * PREV_WIDTH
    return answer.rjust(PREV_WIDTH, "0")


RELAY_SLOTS = 2  # earlier answers shown to the last of three agents


def render_prompt(problem: str, previous: list[str | None] = (), slots: int = RELAY_SLOTS) -> str:
    """``____|____|347+589=`` for the first agent, ``0936|____|347+589=`` for the second,
    ``0936|0926|347+589=`` for the third.

    Every turn's prompt has the same length and the operands sit at the same positions, so the
    column-by-column chain is one skill whatever the agent's place in the relay (no padding, no
    position shifts: the measured recipe that makes the tiny model learn it).
    """
    shown = [render_previous(p) for p in previous] + ["_" * PREV_WIDTH] * max(0, slots - len(previous))
    return "".join(s + "|" for s in shown) + problem + "="


@dataclass
class ArithmeticTask:
    """Generator of problems and SFT transcripts; ``seed`` fixes everything."""

    identity = "embedded"  # the dataset name `satseq eval --dataset embedded` records
    seed: int = 0
    low: int = 100
    high: int = 999

    def problems(self, n: int, *, split: str = "train", exclude: set[str] | None = None) -> list[Problem]:
        """``n`` distinct problems; ``split`` changes the stream, ``exclude`` keeps splits disjoint."""
        rng = random.Random(f"{self.seed}-{split}")
        return distinct_problems(n, split, exclude, lambda: (rng.randint(self.low, self.high),
                                                             rng.randint(self.low, self.high)))

    def sft_examples(self, n: int, *, max_previous: int = 2, p_careful: float = 0.5,
                     exclude: set[str] | None = None) -> list[tuple[str, str]]:
        """(prompt, completion) pairs for the warm start, covering relay positions 1..max_previous+1.

        Earlier agents' answers in the prompt are the right answer or a near miss, each half of the
        time; the completion does not depend on them.
        """
        rng = random.Random(f"{self.seed}-sft")
        out = []
        while len(out) < n:
            a, b = rng.randint(self.low, self.high), rng.randint(self.low, self.high)
            if exclude and f"{a}+{b}" in exclude:
                continue
            k = rng.randint(0, max_previous)
            prev = [str(a + b) if rng.random() < 0.5 else str(near_miss(a + b, rng)) for _ in range(k)]
            prompt = render_prompt(f"{a}+{b}", prev)
            completion = careful_solution(a, b) if rng.random() < p_careful else boxed(str(a + b))
            out.append((prompt, completion))
        return out


def distinct_problems(n: int, split: str, exclude: set[str] | None,
                      draw: Callable[[], tuple[int, ...]]) -> list[Problem]:
    """``n`` distinct sums ``x+y(+z...)`` of the operands ``draw()`` returns, none in ``exclude``;
    ids ``<split>-<i>``, operands in ``meta`` as ``a``, ``b``, ``c``."""
    seen = set(exclude or ())
    out: list[Problem] = []
    while len(out) < n:
        operands = draw()
        text = "+".join(map(str, operands))
        if text in seen:
            continue
        seen.add(text)
        out.append(Problem(problem_id=f"{split}-{len(out)}", problem=text, answer=str(sum(operands)),
                           meta=dict(zip("abc", operands))))
    return out


def near_miss(x: int, rng: random.Random) -> int:
    """A plausible wrong answer: off by 1, 10 or 100, or a carry dropped."""
    delta = rng.choice([1, 10, 100, -1, -10, -100])
    y = x + delta
    return y if y > 0 else x + abs(delta)


def careful_probes(problems) -> list[Probe]:
    """The base warm start's validation: the careful chain (its first character forced) on each problem."""
    return [Probe("careful", render_prompt(p.problem), careful_solution(p.meta["a"], p.meta["b"])[0], p.answer)
            for p in problems]
