"""The embedded *chain* relay task (``data.embedded_task=chain``): a sum of three numbers that three
agents in turn can split into stages, so that a later agent must build on an earlier agent's output.

Problems are those of :mod:`satseq.data.sum_of_three` (``a+b+c``, ``a, b`` in 100..499, ``c`` in
100..999), shown in the relay layout of :func:`satseq.data.arithmetic.render_prompt`
(``____|____|347+289+126=``, then ``0636|____|...``, ``0636|0762|...``): each agent sees the answers
of the agents before it. The tiny model can reach the sum three ways, all in its warm start:

* **single pass** — one three-operand column chain (``7+9+6+0=22,...;\\boxed{762}``), practised
  little in the warm start; or a hasty ``\\boxed{762}``, almost never right;
* **stage 1** (first agent) — ``a+b`` only, ``part:347+289=7+9+0=16,...;\\boxed{636}``: not the
  answer, but an operand for the next agent;
* **stage 2** (a later agent) — (the previous agent's answer) + ``c``,
  ``next:636+126=6+6+0=12,...;\\boxed{762}``: right when the previous answer was ``a+b``;
* **copy** (third agent) — ``same:\\boxed{762}``, the second agent's answer.

A stage restates its two operands before their column chain, so the chain runs in the base warm
start's own layout (``347+289=`` then the columns): without the restatement the operands sit at other
offsets than the base task's, and on the base warm start trained to its target the stages stayed near
0.1 greedy accuracy after 900 SFT steps (measured; with it, the chain warm start reaches its target in
≈ 700 steps, docs/embedded_default.md).

The vote of the relay (majority, ties toward the later agent) is right when agents 2 and 3 agree on
the sum. The joint policy "stage 1 → stage 2 → copy" is right ≈ 0.8 of the time; a single agent alone
can only single-pass (its warm start is weak at that: docs/sat_seq.md). Each behaviour opens with its own word, so RL can move one without the
others. Stage 1 pays only if the next agent builds on it, and stage 2 only if the agent before wrote
``a+b``: the agents' best responses depend on each other, which is what the order of a block-coordinate
update is for (docs/sat_seq.md, "When do several agents beat one?"). Train it with the team reward
only (``reward.own=0``): a stage-1 answer is not the sum, so per-turn correctness would punish it.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from satseq.data.arithmetic import boxed, column_chain, near_miss, render_prompt
from satseq.data.sum_of_three import SumOfThreeTask, _draw, single_pass_solution
from satseq.records import Probe

STAGE1, STAGE2, COPY = "part:", "next:", "same:"
#: the task's ``rollout.max_new_tokens`` default: a stage restates its operands, then the chain (≈ 52 characters)
MAX_NEW_TOKENS = 64
#: warm-start behaviour weights at relay positions 1, 2, 3, and how often each position is drawn. The
#: stage steps are practised, the one-shot single pass barely (1 transcript in 28): the regime this task
#: is about, a model that can take the two-operand step but not the whole computation (measured:
#: docs/sat_seq.md). Stage 2 gets the largest share: reading an operand from an earlier agent's slot is
#: the one new skill (a third of this share left it right 1 time in 10; measured, raised). Positions 1
#: and 3 are drawn 2 times in 7 each (stage 1 and the copy were the slowest to reach the target at 1 in 5).
MIX = {1: {"stage1": 3, "single": 1, "hasty": 4},
       2: {"stage2": 8, "hasty": 2},
       3: {"stage2": 3, "copy": 3, "hasty": 2}}
POSITION_WEIGHTS = {1: 2, 2: 3, 3: 2}
P_PARTIAL_SHOWN = 0.8  # how often the first agent's answer in a later prompt is a partial sum


@dataclass
class ChainTask(SumOfThreeTask):
    """The problems of :class:`SumOfThreeTask` under their own identity (an eval set names its task)."""

    identity = "embedded-chain"


def _earlier(value: int, rng: random.Random, p_right: float = 0.5) -> int:
    """What an earlier agent wrote: ``value`` or a near miss of it."""
    return value if rng.random() < p_right else near_miss(value, rng)


def stage1_solution(a: int, b: int) -> str:
    """``part:347+289=7+9+0=16,...;\\boxed{636}``: the two operands restated, then their column chain."""
    chain, part = column_chain(a, b)
    return f"{STAGE1}{a}+{b}={chain};{boxed(part)}"


def stage2_solution(previous: int, c: int) -> str:
    """``next:636+126=6+6+0=12,...;\\boxed{762}``: the earlier answer and ``c`` restated, then their chain."""
    chain, total = column_chain(previous, c)
    return f"{STAGE2}{previous}+{c}={chain};{boxed(total)}"


def transcript(position: int, a: int, b: int, c: int, rng: random.Random) -> tuple[str, str]:
    """One (prompt, completion) pair for relay ``position`` 1..3."""
    problem, s, total = f"{a}+{b}+{c}", a + b, a + b + c
    # the first agent wrote a partial sum, or tried the whole sum
    first = _earlier(s, rng) if rng.random() < P_PARTIAL_SHOWN else _earlier(total, rng)
    previous = [] if position == 1 else [str(first)]
    if position == 3:
        second = first + c if first < 1000 and rng.random() < 0.5 else _earlier(total, rng)
        previous.append(str(second))
    prompt = render_prompt(problem, previous)
    kinds = [k for k, w in MIX[position].items() for _ in range(w)]
    kind = rng.choice(kinds)
    if kind == "stage2" and first >= 1000:  # the two-operand chain takes a three-digit operand
        kind = "hasty"
    if kind == "stage1":
        return prompt, stage1_solution(a, b)
    if kind == "stage2":
        return prompt, stage2_solution(first, c)
    if kind == "copy":
        return prompt, COPY + boxed(previous[1])
    if kind == "single":
        return prompt, single_pass_solution(a, b, c)
    return prompt, boxed(str(total))


def chain_examples(n: int, *, seed: int = 0, exclude: set[str] | None = None) -> list[tuple[str, str]]:
    """``n`` warm-start pairs, positions drawn by :data:`POSITION_WEIGHTS`; held-out problems never appear."""
    rng = random.Random(f"{seed}-chain-sft")
    out = []
    while len(out) < n:
        a, b, c = _draw(rng)
        if exclude and f"{a}+{b}+{c}" in exclude:
            continue
        position = rng.choices(list(POSITION_WEIGHTS), weights=list(POSITION_WEIGHTS.values()))[0]
        out.append(transcript(position, a, b, c, rng))
    return out


def behaviour(text: str) -> str:
    """Which warm-start behaviour a completion shows (for the task's diagnostics)."""
    for tag, name in ((STAGE1, "stage1"), (STAGE2, "stage2"), (COPY, "copy")):
        if text.startswith(tag):
            return name
    return "hasty" if text.lstrip().startswith("\\boxed") else "single"


def behaviour_shares(episodes) -> dict[str, float]:
    """``chain/<role>/<behaviour>``: the share of each role's turns showing each behaviour."""
    counts: dict[str, dict[str, int]] = {}
    for ep in episodes:
        for t in ep.turns:
            c = counts.setdefault(t.role, {})
            b = behaviour(t.text)
            c[b] = c.get(b, 0) + 1
    return {f"chain/{role}/{b}": n / sum(c.values()) for role, c in counts.items() for b, n in sorted(c.items())}


def chain_probes(problems, *, seed: int = 0) -> list[Probe]:
    """The chain warm start's validation, one probe of each stage per problem (the stage's opening
    word forced): **stage 1** (position 1: ``a+b``), **stage 2** (position 2, agent 1 wrote ``a+b``:
    the sum) and **copy** (position 3: agent 2's answer, the sum or a near miss of it)."""
    rng = random.Random(f"{seed}-chain-probes")
    out = []
    for p in problems:
        a, b, c = p.meta["a"], p.meta["b"], p.meta["c"]
        s, total = str(a + b), a + b + c
        second = str(_earlier(total, rng))
        out += [Probe("stage1", render_prompt(p.problem), STAGE1, s),
                Probe("stage2", render_prompt(p.problem, [s]), STAGE2, str(total)),
                Probe("copy", render_prompt(p.problem, [s, second]), COPY, second)]
    return out
