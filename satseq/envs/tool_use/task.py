"""The tool environment's embedded task: a product the tiny model cannot work out in one pass, but can
by calling the sandboxed Python.

Problems are ``a*b`` with ``a`` in 100..999 and ``b`` in 10..99 (the product has 4 or 5 digits). The
first prompt is the embedded model's layout, ``____|____|347*29=`` (:func:`satseq.data.arithmetic.render_prompt`),
so ``env.name=single`` shows the same problem with the same ids. The warm start's transcripts
(:func:`tool_examples`) are whole episodes of the ``tool_use`` protocol in the embedded model's plain
conversation format (:class:`satseq.envs.conversation.PlainFormat`):

* **with the tool** (share :data:`P_TOOL`): turn 1 writes the program, turn 2 copies what it printed::

      ____|____|347*29=```python\\nprint(347*29)\\n```<eos>tool python: 10063\\n\\boxed{10063}<eos>

* **direct** (the rest): ``____|____|347*29=\\boxed{10063}<eos>``, one pass.

Both are the right answer, yet a 2M-parameter transformer cannot multiply a 3-digit by a 2-digit number
in one pass: its direct answers are mostly wrong (the ``direct`` probe, :func:`tool_probes`). The first
character decides which it does (`````: the tool; ``\\``: direct), so the warm start calls the tool on
about :data:`P_TOOL` of its episodes, and RL has the two behaviours to select between. The task is built
so that the tool must win: the program is the problem itself, and copying is within the tiny model.

The held-out pool is the same for every task seed (:data:`HELD_OUT_KEY`): a warm start built with SFT
seed 1 never trains on the problems that runs (task seed 0) are evaluated on.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from satseq.data.arithmetic import boxed, render_prompt
from satseq.records import Probe, Problem

A_RANGE, B_RANGE = (100, 999), (10, 99)
P_TOOL = 0.5  # the warm start's episodes that call the tool
TOOL_NAME = "python"
HELD_OUT_KEY = "product-eval"  # the eval stream's seed, whatever the task seed


def program(a: int, b: int) -> str:
    """The one-line program that computes ``a*b``."""
    return f"print({a}*{b})"


def call_text(a: int, b: int) -> str:
    """Turn 1 of an episode with the tool: the program in a fenced block (the ``python_block`` parser's call)."""
    return f"```python\n{program(a, b)}\n```"


def tool_turn(result: str, eos: str) -> str:
    """What the conversation adds after a call turn: its EOS, then the tool message (PlainFormat's
    ``"tool <name>: <content>\\n"``)."""
    return f"{eos}tool {TOOL_NAME}: {result}\n"


@dataclass
class ProductTask:
    """Problems ``a*b``; ``seed`` fixes the train and validation streams, the eval stream is fixed."""

    identity = "embedded-product"  # the dataset name `satseq eval --dataset embedded` records
    seed: int = 0

    def problems(self, n: int, *, split: str = "train", exclude: set[str] | None = None) -> list[Problem]:
        rng = random.Random(HELD_OUT_KEY if split == "eval" else f"{self.seed}-product-{split}")
        seen = set(exclude or ())
        out: list[Problem] = []
        while len(out) < n:
            a, b = rng.randint(*A_RANGE), rng.randint(*B_RANGE)
            text = f"{a}*{b}"
            if text in seen:
                continue
            seen.add(text)
            out.append(Problem(problem_id=f"{split}-{len(out)}", problem=text, answer=str(a * b),
                               meta={"a": a, "b": b}))
        return out


def episode_examples(a: int, b: int, with_tool: bool, eos: str) -> list[tuple[str, str]]:
    """The (prompt, completion) pairs of one warm-start episode (module docstring); SFT adds each
    completion's EOS."""
    first = render_prompt(f"{a}*{b}")
    answer = boxed(str(a * b))
    if not with_tool:
        return [(first, answer)]
    call = call_text(a, b)
    return [(first, call), (first + call + tool_turn(str(a * b), eos), answer)]


def tool_examples(n: int, *, seed: int = 0, exclude: set[str] | None = None, p_tool: float = P_TOOL,
                  eos: str = "<eos>") -> list[tuple[str, str]]:
    """At least ``n`` warm-start pairs, whole episodes, a share ``p_tool`` of them with the tool; no
    problem of ``exclude`` (the held-out and validation splits) appears."""
    rng = random.Random(f"{seed}-product-sft")
    out: list[tuple[str, str]] = []
    while len(out) < n:
        a, b = rng.randint(*A_RANGE), rng.randint(*B_RANGE)
        if exclude and f"{a}*{b}" in exclude:
            continue
        out += episode_examples(a, b, rng.random() < p_tool, eos)
    return out


def tool_probes(problems, *, seed: int = 0, eos: str = "<eos>") -> list[Probe]:
    """The warm start's validation, per problem (greedy, the behaviour's opening forced): the **call**
    (after the fence's first characters, the whole program: answer = the call's text, since a call has
    no box), the **copy** of the printed result into the box, and the **direct** one-pass answer. The
    recipe targets the first two; ``direct`` is recorded: it measures that the task cannot be done in
    one pass."""
    out = []
    for p in problems:
        a, b = p.meta["a"], p.meta["b"]
        first, call = render_prompt(p.problem), call_text(a, b)
        out += [Probe("call", first, "```python\nprint(", call),
                Probe("copy", first + call + tool_turn(p.answer, eos), "\\boxed{", p.answer),
                Probe("direct", first, "\\boxed{", p.answer)]
    return out


def behaviour(text: str) -> str:
    """Which warm-start behaviour a first turn shows: ``tool`` (a fenced program) or ``direct``."""
    return "tool" if text.lstrip().startswith("```") else "direct"
