"""MLMT-RL's learnability check (issue 38): a task on which turn 3 MUST beat both turn 1 and copying the
coach if MLMT's training path is right, run through the real ``coach`` workflow, coach reward,
per-role per-turn advantages and clipped update (separate solver and coach models, the default layout).

The task ("split knowledge"), built so that the answer needs what the solver knows *and* what only the
coach can pass on:

* a problem ``47213`` (a random 5-digit number) has the answer ``A``, ``B``, ``C`` or ``D``, drawn at
  random per problem (a hash of the text). Read the four as a 2 × 2 grid: row ``AB`` / ``CD``, column
  ``AC`` / ``BD``. Nothing in the problem says which one it is.
* the **solver** is told the row: ``SCD|47213=`` (turn 1), so alone it is right at most half of the time.
* the **coach** is told the column and sees the attempt: ``CAAC|47213=`` (attempt ``A``, column ``AC``).
  It never sees the row, so its own answer, and a solver that copies it, is right at most half of the time.
* the **refining solver** sees its attempt, the coach's answer and its row: ``RACCD|47213=`` (without
  the feedback, the dependence term's prompt: ``RA_CD|47213=``). Taking the column from the coach's
  letter and the row from its own cue is right every time: turn 3 can reach 1.0, against 0.5 for
  turn 1, the coach alone and copying the coach.

The warm start (SFT of the tiny model from scratch, 600 steps; the coach is a copy of it) samples every
letter without looking at any cue (¼ each); the refining solver combines the coach's letter's column with
its own row 0.9 of the time (``--p-use``), otherwise guesses. So every behaviour RL must
select is sampled, and only the coach's cue separates a useful letter from a useless one. If MLMT's
implementation is right (the coach paid by r(ŷ), advantages per role and turn, gradient on the coach's
tokens and on turn 3's), RL makes the coach give the right column (its letters are followed), turn 1 pick
within its row, and the refining solver always combine: turn 3 well above turn 1 and above copying.

Measured (docs/mlmt.md, "MLMT learnability"): with the default warm start here (600 SFT steps, the
refiner combining 0.9 of the time) seed 0 passes (turn 1 0.410, turn 3 0.953, copying 0.531); with a
weaker warm start (300 steps, 0.5) the refiner ignores the coach's letter and the check fails, and in
several runs the coach stops writing an answer (see the doc). The slow test tries seeds 0, 2, 3 in turn
until one passes (seeds 0 and 2 pass on an AMD EPYC Zen 5: turn 3 0.949 / 0.938, copying 0.508 / 0.523).

``python tests/test_mlmt_learnability.py [--seeds 0 1 2]`` prints the figures (docs/mlmt.md).
"""
from __future__ import annotations

import copy
import random
import sys
import time
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from satseq.records import Problem  # noqa: E402
from hashed_letter_task import LetterFormat, hashed_gold, hashed_problems  # noqa: E402

#: the trained turn 3 must beat turn 1 and copying the coach (each at most 0.5 on this task) by this much
MARGIN = 0.15
LETTERS = "ABCD"


def gold(problem: str) -> str:
    """The answer of ``47213``: one of ``ABCD`` by a hash of the text (unlearnable from the text)."""
    return hashed_gold(problem, LETTERS)


def row(letter: str) -> str:
    return "AB" if letter in "AB" else "CD"


def col(letter: str) -> str:
    return "AC" if letter in "AC" else "BD"


def problems(n: int, seed: int) -> list[Problem]:
    return hashed_problems(n, seed, "split", LETTERS)


class SplitKnowledgeFormat(LetterFormat):
    """The prompt format of the check task (the interface of :class:`EmbeddedMLMTFormat`)."""

    letters = LETTERS

    def single(self, problem: str) -> str:
        return f"S{row(gold(problem))}|{problem}="

    def coach(self, problem: str, attempt: str) -> str:
        return f"C{self._shown(attempt)}{col(gold(problem))}|{problem}="

    def refine(self, problem: str, attempt: str, feedback: str | None) -> str:
        g = "_" if feedback is None else self._shown(feedback)
        return f"R{self._shown(attempt)}{g}{row(gold(problem))}|{problem}="


def sft_examples(n: int, seed: int, p_use: float = 0.5) -> list[tuple[str, str]]:
    """Warm-start transcripts: solver and coach guess without looking at their cues; the refining
    solver uses the coach's letter's column with its own row a share ``p_use`` of the time, otherwise
    guesses (and guesses when the coach gave no letter)."""
    fmt = SplitKnowledgeFormat(None)
    rng = random.Random(f"split-sft-{seed}")
    box = "\\boxed{%s}".__mod__
    out = []
    for p in problems(n, seed + 1000):
        kind = rng.choice(["solve", "coach", "refine", "refine"])
        if kind == "solve":
            out.append((fmt.single(p.problem), box(rng.choice(LETTERS))))
        elif kind == "coach":
            out.append((fmt.coach(p.problem, box(rng.choice(LETTERS))), box(rng.choice(LETTERS))))
        else:
            c = rng.choice(LETTERS + "?")
            use = c != "?" and rng.random() < p_use
            y = next(x for x in LETTERS if x in row(p.answer) and x in col(c)) if use else rng.choice(LETTERS)
            out.append((fmt.refine(p.problem, box(rng.choice(LETTERS)), box(c) if c != "?" else "?"), box(y)))
    return out


def warm_start_probe(model, tok, n: int = 200) -> dict:
    """The refining solver's next-letter probabilities after ``\\boxed{`` (attempt ``A``, each coach letter):
    ``uses_coach`` = P(row ∩ the coach's column) (the designed warm start: 0.625; ignoring the coach and
    picking within the row: ~0.375), ``in_row`` = P(a letter of its row) (designed 0.75)."""
    fmt = SplitKnowledgeFormat(tok)
    ids = {L: tok(L, add_special_tokens=False)["input_ids"][0] for L in LETTERS}
    use = in_row = 0.0
    was = model.training
    model.eval()
    for p in problems(n, 77):
        for c in LETTERS:
            x = fmt.encode(fmt.refine(p.problem, "\\boxed{A}", "\\boxed{%s}" % c) + "\\boxed{")
            with torch.no_grad():
                pr = torch.softmax(model(torch.tensor([x])).logits[0, -1].float(), -1)
            target = next(y for y in LETTERS if y in row(p.answer) and y in col(c))
            use += float(pr[ids[target]])
            in_row += sum(float(pr[ids[y]]) for y in row(p.answer))
    model.train(was)
    return {"uses_coach": use / (4 * n), "in_row": in_row / (4 * n)}


def figures(episodes) -> dict:
    """Turn 1, turn 3, the coach alone (its own answer), copying the coach (= the coach's answer, right
    or wrong; no answer counts wrong), and how often turn 3 combines the coach's column with the row."""
    from satseq.envs.coach.metrics import mlmt_rollout_metrics
    from satseq.rewards.turn_rewards import grade_episodes

    grade_episodes(episodes)
    m = mlmt_rollout_metrics(episodes)
    n = max(1, len(episodes))
    coach_col = [(a := ep.turns[1].answer) is not None and len(a) == 1 and a in LETTERS
                 and col(a) == col(ep.problem.answer) for ep in episodes]
    return {"acc_t1": m["mlmt/acc_t1"], "acc_t3": m["mlmt/acc_t3"], "coach_alone": m["mlmt/coach_accuracy"],
            "copy_coach": sum(bool(ep.turns[1].correct) for ep in episodes) / n,
            "coach_right_column": sum(coach_col) / n, "follows_coach": m["mlmt/follows_coach"]}


def run_check(seed: int = 0, *, steps: int = 40, prompts: int = 16, group: int = 4, lr: float = 3e-4,
              sft_steps: int = 600, eval_problems: int = 256, p_use: float = 0.9, overrides: tuple[str, ...] = (),
              log=None) -> dict:
    """Warm start, ``steps`` MLMT steps (the default ``mlmt`` settings: schedule 1:1, λ_dep 0.1,
    separate models), then held-out figures of the warm start and the trained pair (T = 1)."""
    from satseq.config.loader import load_config
    from satseq.methods.mlmt.updater import MLMTUpdater
    from satseq.models.agents import AgentPool
    from satseq.models.sft import SFTConfig, run_sft
    from satseq.models.tiny import build_tiny_model
    from satseq.rollout.hf_engine import HFEngine
    from satseq.rollout.types import SamplingParams
    from satseq.workflows.coach import CoachWorkflow

    t0 = time.perf_counter()
    model, tok = build_tiny_model(seed=seed)
    run_sft(model, tok, sft_examples(sft_steps * 64, seed, p_use), SFTConfig(steps=sft_steps, seed=seed),
            show_progress=False)
    probe = warm_start_probe(model, tok)
    if log:
        log(f"warm start's refining solver: P(row ∩ coach's column) {probe['uses_coach']:.3f} (designed 0.625), "
            f"P(its row) {probe['in_row']:.3f} (designed 0.75)")
    cfg = load_config(None, ["method=mlmt", f"ppo.lr={lr}", f"ppo.mini_batch_size={prompts * group * 3}",
                             f"trainer.train_batch_size={prompts}", f"grpo.group_size={group}",
                             "rollout.max_new_tokens=12", *overrides])
    pool = AgentPool.full(["solver", "coach"], [model, copy.deepcopy(model)], tok)
    engine = HFEngine(tok)
    wf = CoachWorkflow({"solver": "solver", "coach": "coach"}, SplitKnowledgeFormat(tok),
                       SamplingParams(max_new_tokens=12, temperature=1.0))
    gen = torch.Generator().manual_seed(seed)
    updater = MLMTUpdater(cfg, pool, {"solver": "solver", "coach": "coach"}, gen)
    held_out = problems(eval_problems, seed + 2000)

    def set_mode(train: bool) -> None:
        for a in ("solver", "coach"):
            pool.module(a).train(train)

    def evaluate() -> dict:
        set_mode(False)
        eps = wf.rollout(held_out, pool, engine, generator=torch.Generator().manual_seed(10_000 + seed))
        return figures(eps)

    start = evaluate()
    train = problems(prompts * steps, seed + 3000)
    for step in range(steps):
        set_mode(False)
        eps = wf.rollout(train[step * prompts:(step + 1) * prompts], pool, engine, group_size=group, generator=gen)
        r = updater.assign_rewards(eps)
        set_mode(True)
        updater.update(step, eps)
        if log and step % 5 == 0:
            f = figures(eps)
            log(f"step {step}: " + " ".join(f"{k} {v:.3f}" for k, v in f.items())
                + f" coach reward {r['coach/reward']:.3f} dep {r['coach/dep']:.3f} e.g. coach {eps[0].turns[1].text!r}")
    end = evaluate()
    return {"start": start, "end": end, "probe": probe, "seconds": time.perf_counter() - t0}


#: seeds tried in turn until one passes: which runs learn depends on the seed and on the CPU's kernels
#: (docs/mlmt.md: seed 1's warm start did not learn to use the coach's letter on one CPU); a broken path
#: passes with none
SEEDS = (0, 2, 3)


@pytest.mark.slow
def test_mlmt_turn3_beats_turn1_and_copying_where_the_coach_knows_what_the_solver_lacks():
    torch.set_num_threads(1)
    tried = []
    for seed in SEEDS:
        res = run_check(seed=seed)
        start, end = res["start"], res["end"]
        # turn 1 and the coach guess among four letters at the start; turn 3 uses the untrained coach's
        # letter, in the right column about half the time, so it starts near 0.45
        assert max(start["acc_t1"], start["coach_alone"]) < 0.4 and start["acc_t3"] < 0.6, (seed, start)
        tried.append((seed, round(res["probe"]["uses_coach"], 3), round(end["acc_t3"], 3), round(end["copy_coach"], 3)))
        # the warm start's refiner must use the coach's letter, or the coach has nothing to learn from
        if res["probe"]["uses_coach"] >= 0.6 and end["acc_t3"] >= 0.5 + MARGIN:
            break
    else:
        pytest.fail(f"turn 3 learned in none of seeds {SEEDS} ((seed, probe, turn 3, copying): {tried})")
    # turn 1 and the coach alone can reach 0.5 at most on this task; turn 3 can reach 1.0
    assert end["acc_t3"] >= end["acc_t1"] + MARGIN, (seed, end)
    assert end["acc_t3"] >= end["copy_coach"] + MARGIN, (seed, end)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--sft-steps", type=int, default=600)
    ap.add_argument("--p-use", type=float, default=0.9, help="the warm start's share of turn-3 answers that use the coach")
    ap.add_argument("--set", nargs="*", default=[], help="config overrides, e.g. mlmt.lambda_dep=0")
    args = ap.parse_args()
    torch.set_num_threads(1)
    keys = ("acc_t1", "acc_t3", "coach_alone", "copy_coach", "coach_right_column", "follows_coach")
    for s in args.seeds:
        r = run_check(seed=s, steps=args.steps, lr=args.lr, p_use=args.p_use, sft_steps=args.sft_steps,
                      overrides=tuple(args.set), log=print)
        for when in ("start", "end"):
            print(f"seed {s} {when:5s} " + " ".join(f"{k} {r[when][k]:.3f}" for k in keys))
        print(f"seed {s}: {r['seconds']:.0f} s")
