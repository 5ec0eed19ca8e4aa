"""MLMT's embedded task: the sum of three numbers, where the coach knows a method the solver does not use.

Problems are ``a+b+c`` with ``a, b`` in 100..499 and ``c`` in 100..999 (so ``a+b`` has three digits).
The tiny model can add them two ways, both written as completions of its warm start:

* single pass — one column chain over three operands, ``7+9+6+0=22,4+8+2+2=16,...;\\boxed{1062}``
  (each column sums three digits and a carry: a harder table than two-operand addition);
* two stages — ``a+b`` first, then ``(a+b)+c``, each the two-operand column chain of the base warm
  start, ``7+9+0=16,...;936|6+6+0=12,...;\\boxed{1062}``.

The **solver's** warm-start transcripts solve in a single pass (or answer hastily, 1/2); the
**coach's** demonstrate the two-stage method (3/4) or answer hastily. Measured on the warm start (T = 1,
200 held-out problems): the solver's single-pass chains are right 0.28 of the time, the coach's
two-stage demonstrations about 0.85. So the coach has something to teach, which is the situation MLMT-RL is for (the seed's high level "generates synthetic
demonstrations"): RL has to make the coach write its demonstration and the solver use it. On the
two-operand task the coach had nothing the solver lacked: turn 1 reached 0.91 and turn 3 could add at
most an ensemble's few points (docs/mlmt.md).

Prompts keep the multi-turn layouts of :mod:`satseq.data.multiturn` with the longer problem
(``____|____|347+289+126=``, coach ``1062|tip?|347+289+126=``, refine ``1062:0762|347+289+126=``),
fixed length per task, so batches need no padding.

Refining-solver transcripts (an attempt and a coach answer shown): copy the coach's answer 3/5
(``tip:\\boxed{762}``), else solve again; which pays is for RL to find. (A third option, keeping the
attempt, made the tiny model mix up the two four-digit slots when copying; measured, dropped.)
"""
from __future__ import annotations

import random
from dataclasses import dataclass

MAX_NEW_TOKENS = 96  # the coach's two-stage demonstration is ~70 characters (MLMT's rollout.max_new_tokens default)
from satseq.data.arithmetic import (boxed, careful_solution, column_chain, distinct_problems, near_miss,
                                    render_prompt)
from satseq.data.multiturn import coach_prompt, refine_prompt
from satseq.records import Probe, Problem

A_RANGE, C_RANGE = (100, 499), (100, 999)
P_COPY_HINT = 0.6
P_TWO_STAGE = 0.75  # the coach's warm start demonstrates the method 3/4 of the time, else answers hastily
# A copy opens with its own word, so that turn-1 training against hasty answers (which open with
# ``\boxed``) does not also suppress copying (measured: it did, and turn 3 fell back to solving).
USE_HINT = "tip:"
MIX = {"solve": 3, "coach": 3, "refine": 4, "refine_blank": 1, "solve_two_operands": 1}


def single_pass_solution(a: int, b: int, c: int) -> str:
    """``7+9+6+0=22,4+8+2+2=16,3+2+1+1=07;\\boxed{762}``: three operands, column by column."""
    digits3 = [f"{x:03d}"[::-1] for x in (a, b, c)]
    carry, cols, digits = 0, [], []
    for x, y, z in zip(*digits3):
        s = int(x) + int(y) + int(z) + carry
        cols.append(f"{x}+{y}+{z}+{carry}={s:02d}")
        digits.append(s % 10)
        carry = s // 10
    total = (str(carry) if carry else "") + "".join(str(d) for d in reversed(digits))
    assert int(total) == a + b + c
    return ",".join(cols) + ";" + boxed(total)


def two_stage_solution(a: int, b: int, c: int) -> str:
    """``<chain of a+b>;s|<chain of s+c>;\\boxed{t}``: two two-operand column chains."""
    first, s = column_chain(a, b)
    second, total = column_chain(int(s), c)
    return f"{first};{s}|{second};{boxed(total)}"


@dataclass
class SumOfThreeTask:
    """Problems of the form ``a+b+c``; ``seed`` fixes everything; splits are disjoint via ``exclude``."""

    identity = "embedded-sum3"  # the dataset name `satseq eval --dataset embedded` records
    seed: int = 0

    def problems(self, n: int, *, split: str = "train", exclude: set[str] | None = None) -> list[Problem]:
        rng = random.Random(f"{self.seed}-sum3-{split}")
        return distinct_problems(n, split, exclude, lambda: _draw(rng))


def _draw(rng: random.Random) -> tuple[int, int, int]:
    return rng.randint(*A_RANGE), rng.randint(*A_RANGE), rng.randint(*C_RANGE)


def _shown(total: int, rng: random.Random, p_right: float = 0.5) -> str:
    u = rng.random()
    if u < p_right:
        return str(total)
    if u < 0.9:
        return str(near_miss(total, rng))
    return str(rng.randint(300, 1997))


def _solve(a: int, b: int, c: int, rng: random.Random) -> str:
    return single_pass_solution(a, b, c) if rng.random() < 0.5 else boxed(str(a + b + c))


def transcript(kind: str, a: int, b: int, c: int, rng: random.Random) -> tuple[str, str]:
    """One (prompt, completion) pair of turn ``kind`` (a key of :data:`MIX`)."""
    problem, total = f"{a}+{b}+{c}", a + b + c
    if kind == "solve":
        return render_prompt(problem), _solve(a, b, c, rng)
    if kind == "coach":
        demo = two_stage_solution(a, b, c) if rng.random() < P_TWO_STAGE else boxed(str(total))
        return coach_prompt(problem, _shown(total, rng)), demo
    if kind == "refine":
        attempt, hint = _shown(total, rng), _shown(total, rng, p_right=0.7)
        prompt, u = refine_prompt(problem, attempt, hint), rng.random()
        if u < P_COPY_HINT:
            return prompt, USE_HINT + boxed(hint)
        return prompt, _solve(a, b, c, rng)
    if kind == "refine_blank":
        return refine_prompt(problem, _shown(total, rng), None, with_hint=False), _solve(a, b, c, rng)
    if kind == "solve_two_operands":  # keeps the base skill that the two-stage method is made of
        x, y = rng.randint(100, 999), rng.randint(100, 999)
        return render_prompt(f"{x}+{y}"), careful_solution(x, y) if rng.random() < 0.5 else boxed(str(x + y))
    raise ValueError(f"unknown transcript kind {kind!r} (known: {', '.join(MIX)})")


def behaviour(text: str) -> str:
    """Which of the warm start's behaviours a turn shows: ``copy`` (the refining solver's ``tip:``),
    ``two_stage`` (the coach's method: two chains joined by ``|``), ``hasty`` (a bare ``\\boxed{}``)
    or ``single`` (the three-operand single pass, or anything else)."""
    if text.startswith(USE_HINT):
        return "copy"
    if text.startswith("\\boxed"):
        return "hasty"
    return "two_stage" if "|" in text else "single"


def mlmt_examples(n: int, *, seed: int = 0, exclude: set[str] | None = None) -> list[tuple[str, str]]:
    """``n`` warm-start (prompt, completion) pairs drawn from :data:`MIX`; held-out problems never appear."""
    rng = random.Random(f"{seed}-sum3-sft")
    kinds = [k for k, w in MIX.items() for _ in range(w)]
    out = []
    while len(out) < n:
        a, b, c = _draw(rng)
        if exclude and f"{a}+{b}+{c}" in exclude:
            continue
        out.append(transcript(rng.choice(kinds), a, b, c, rng))
    return out


def mlmt_probes(problems, *, seed: int = 0) -> list[Probe]:
    """MLMT's warm-start validation, per problem (the behaviour's opening forced): the coach's
    **two-stage** demonstration (after a shown attempt: the sum), the refining solver's **copy** of the
    coach's hint (``tip:``: the hint, right or a near miss), and the three-operand **single pass**, both
    as the solver's first answer and as the refining solver's re-solve (its first digit: the sum). The
    recipe targets the first two; the single pass is recorded at every check: six builds had it right
    0.38–0.78 of the time at T = 1 when the other two were done, which moved turn 3 between 0.51 and
    0.67 (docs/embedded_default.md)."""
    rng = random.Random(f"{seed}-sum3-probes")
    out = []
    for p in problems:
        a, b, c = p.meta["a"], p.meta["b"], p.meta["c"]
        total = a + b + c
        hint = _shown(total, rng, p_right=0.7)
        single = single_pass_solution(a, b, c)[0]
        out += [Probe("coach_two_stage", coach_prompt(p.problem, _shown(total, rng)), two_stage_solution(a, b, c)[0],
                      str(total)),
                Probe("refine_copy", refine_prompt(p.problem, _shown(total, rng), hint), USE_HINT, hint),
                Probe("solver_single", render_prompt(p.problem), single, str(total)),
                Probe("refine_single", refine_prompt(p.problem, _shown(total, rng), hint), single, str(total))]
    return out
