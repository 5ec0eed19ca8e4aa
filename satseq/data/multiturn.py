"""Multi-turn roles on the embedded arithmetic task: prompts and PAG's warm-start transcripts.

The base warm start (:mod:`satseq.data.arithmetic`) only solves. PAG's verifier and reviser need
transcripts of their own, or the tiny model could not play those roles at all. Every prompt keeps the
fixed layout ``SLOT|SLOT|<problem>=`` (the operands at the same positions in every turn); the slots
tell the turn. The prompt builders are shared with MLMT, whose own task and transcripts live in
:mod:`satseq.data.sum_of_three`.

=====================  ==========================  =============================================
turn                   prompt                      warm-start completions (SFT mix)
=====================  ==========================  =============================================
solve                  ``____|____|347+589=``      careful 1/2, hasty 1/2 (as the base)
PAG verify y           ``0935|chk?|347+589=``      careful check, column by column against the
                                                   attempt's digit ``7+9+0=16:5!,...;no`` /
                                                   ``...;ok`` (``P_CAREFUL_VERIFY``), else a
                                                   hasty verdict ``ok`` (4/5) / ``no``
PAG revise y           ``0935|no__|347+589=``      careful 1/3, hasty 1/3, copy the attempt 1/3
coach (sees z)         ``0935|tip?|347+589=``      careful 1/2, hasty 1/2 (a worked demonstration)
refine (z, g)          ``0935:0936|347+589=``      z == g: copy it; else careful 1/2, hasty 1/2
refine without g       ``0935:____|347+589=``      careful 1/2, hasty 1/2
=====================  ==========================  =============================================

"careful" is the column-by-column chain, "hasty" the boxed answer alone (see the base module).
The hasty verifier is over-trusting (it mostly says ``ok``), the starting point the PAG paper
reports for real models; RL has to find that checking pays. Attempts shown in SFT prompts are right
half of the time and a near miss (or, rarely, a random number / ``????``) otherwise.

Why the careful check compares column by column (:func:`careful_verification`): the earlier check
recomputed the sum, then wrote it and the attempt as numbers and compared them (``...;936!=935;no``).
The tiny model learned the columns (right on 1.000 of probes) but not the rest: greedy, its verdict was
at chance (0.500), and with 4× the verification transcripts still 0.53 even where it wrote both numbers
right (``bench/methods/pag_verify_probe.py``, docs/apo_pag.md). Comparing two numbers is the step it
does not learn. Here each column compares its digit with the attempt's digit in the same column, read
from a fixed slot of the prompt: a local check, learned (greedy verdict 60 / 60 after 1,200 SFT steps).

The coach and refine kinds on this two-operand task were MLMT's first warm start; MLMT now trains on
the sum of three (on two operands turn 1 reached 0.91 and the coach had nothing left to add,
docs/mlmt.md). They stay in this corpus so that PAG's warm start, and its measured figures, do not
change.
"""
from __future__ import annotations

import random

from satseq.data.arithmetic import (PREV_WIDTH, boxed, careful_solution, column_chain, near_miss, render_previous,
                                    render_prompt)
from satseq.records import Probe

VERIFY_SLOT = "chk?"
REVISE_SLOTS = {"wrong": "no__", "correct": "ok__", None: "????"}
COACH_SLOT = "tip?"
BLANK = "_" * PREV_WIDTH
P_CAREFUL_VERIFY = 0.5
P_HASTY_OK = 0.8

# relative weights of the turn kinds in the multi-turn warm-start corpus (verify: enough careful checks
# for SFT to learn them, ~20 % of the corpus)
MIX = {"solve": 3, "verify": 6, "revise": 1, "coach": 1, "refine": 2, "refine_blank": 1}


def verify_prompt(problem: str, attempt_answer: str | None) -> str:
    return f"{render_previous(attempt_answer)}|{VERIFY_SLOT}|{problem}="


def revise_prompt(problem: str, attempt_answer: str | None, verdict: str | None) -> str:
    return f"{render_previous(attempt_answer)}|{REVISE_SLOTS[verdict]}|{problem}="


def coach_prompt(problem: str, attempt_answer: str | None) -> str:
    return f"{render_previous(attempt_answer)}|{COACH_SLOT}|{problem}="


def refine_prompt(problem: str, attempt_answer: str | None, hint_answer: str | None, *,
                  with_hint: bool = True) -> str:
    """``0935:0936|347+589=``; ``with_hint=False`` blanks the coach's slot (``0935:____|...``)."""
    hint = render_previous(hint_answer) if with_hint else BLANK
    return f"{render_previous(attempt_answer)}:{hint}|{problem}="


def careful_verification(a: int, b: int, attempt_answer: str | None) -> str:
    """``7+9+0=16:5!,4+8+1=13:3=,3+5+1=09:9=,0:0=;no`` for ``347+589`` against ``935``: each column of the
    careful chain, then the attempt's digit in that column and ``=`` (it is the column's digit) or ``!``;
    the last column is the final carry against the attempt's thousands digit; ``ok`` when every column
    agrees. An attempt the prompt shows as ``????`` (none, or not 4 digits) disagrees everywhere."""
    shown = render_previous(attempt_answer)[::-1]  # the attempt's digits, units first ("????" when unusable)
    da, db = f"{a:03d}"[::-1], f"{b:03d}"[::-1]
    carry, cols, agree = 0, [], True
    for i, (x, y) in enumerate(zip(da, db)):
        s = int(x) + int(y) + carry
        same = shown[i] == str(s % 10)
        agree &= same
        cols.append(f"{x}+{y}+{carry}={s:02d}:{shown[i]}{'=' if same else '!'}")
        carry = s // 10
    same = shown[3] == str(carry)
    cols.append(f"{carry}:{shown[3]}{'=' if same else '!'}")
    return ",".join(cols) + (";ok" if agree and same else ";no")


def _shown_answer(total: int, rng: random.Random, p_right: float = 0.5) -> str | None:
    u = rng.random()
    if u < p_right:
        return str(total)
    if u < 0.9:
        return str(near_miss(total, rng))
    if u < 0.97:
        return str(rng.randint(100, 1998))
    return None  # shown as ????


def _solve(a: int, b: int, rng: random.Random) -> str:
    return careful_solution(a, b) if rng.random() < 0.5 else boxed(str(a + b))


def transcript(kind: str, a: int, b: int, rng: random.Random) -> tuple[str, str]:
    """One (prompt, completion) pair of turn ``kind`` (a key of :data:`MIX`) for ``a+b``."""
    problem, total = f"{a}+{b}", a + b
    if kind == "solve":
        return render_prompt(problem), _solve(a, b, rng)
    if kind == "verify":
        att = _shown_answer(total, rng)
        if rng.random() < P_CAREFUL_VERIFY:
            return verify_prompt(problem, att), careful_verification(a, b, att)
        return verify_prompt(problem, att), "ok" if rng.random() < P_HASTY_OK else "no"
    if kind == "revise":
        att = _shown_answer(total, rng, p_right=0.2)
        verdict = "wrong" if rng.random() < 0.9 else None
        u = rng.random()
        if u < 1 / 3 and att is not None:
            return revise_prompt(problem, att, verdict), boxed(att)
        return revise_prompt(problem, att, verdict), careful_solution(a, b) if u < 2 / 3 else boxed(str(total))
    if kind == "coach":
        return coach_prompt(problem, _shown_answer(total, rng)), _solve(a, b, rng)
    if kind == "refine":
        att, hint = _shown_answer(total, rng), _shown_answer(total, rng)
        if rng.random() < 0.3:  # agreement is rare among random draws; show it often enough to learn the rule
            hint = att
        prompt = refine_prompt(problem, att, hint)
        if att is not None and att == hint:
            return prompt, boxed(att)
        return prompt, _solve(a, b, rng)
    if kind == "refine_blank":
        return refine_prompt(problem, _shown_answer(total, rng), None, with_hint=False), _solve(a, b, rng)
    raise ValueError(f"unknown transcript kind {kind!r} (known: {', '.join(MIX)})")


def multiturn_examples(n: int, *, seed: int = 0, low: int = 100, high: int = 999,
                       exclude: set[str] | None = None, mix: dict[str, int] | None = None) -> list[tuple[str, str]]:
    """``n`` (prompt, completion) pairs drawn from ``mix`` (default :data:`MIX`); problems in
    ``exclude`` (the held-out pool) never appear."""
    mix = mix or MIX
    rng = random.Random(f"{seed}-multiturn-sft")
    kinds = [k for k, w in mix.items() for _ in range(w)]
    out = []
    while len(out) < n:
        a, b = rng.randint(low, high), rng.randint(low, high)
        if exclude and f"{a}+{b}" in exclude:
            continue
        out.append(transcript(rng.choice(kinds), a, b, rng))
    return out


def pag_probes(problems, *, seed: int = 0) -> list[Probe]:
    """PAG's warm-start validation, per problem (the behaviour's first character forced): the
    **careful verification** of a shown attempt (the sum or a near miss, ½ each: ``ok`` / ``no``) and
    the **careful revision** after a ``no`` (the sum). The over-trusting ``ok``/``no`` and the hasty
    answer stay in the corpus at their shares; they are what PAG's RL selects against."""
    rng = random.Random(f"{seed}-multiturn-probes")
    out = []
    for p in problems:
        a, b = p.meta["a"], p.meta["b"]
        total = a + b
        att = str(total) if rng.random() < 0.5 else str(near_miss(total, rng))
        check = careful_verification(a, b, att)
        out += [Probe("careful_verify", verify_prompt(p.problem, att), check[0], check.rsplit(";", 1)[-1]),
                Probe("careful_revise", revise_prompt(p.problem, str(near_miss(total, rng)), "wrong"),
                      careful_solution(a, b)[0], str(total))]
    return out
