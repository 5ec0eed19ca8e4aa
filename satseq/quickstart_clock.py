"""The quickstart's clock: the time left, from what this machine has measured so far.

The quickstart's work is known in advance: an evaluation of the warm start, three trainings of a known
number of stages in two lanes (processes) side by side, and three evaluations after them. Each piece has
a **reference time**, measured on the reference machine (:data:`REFERENCE`, the idle 2-core machine the
README names). The time left is

    left = p × (remaining reference work on the longer lane) + p_tail × (the evaluations still to come)

where ``p`` is this machine's pace against the reference:

- before any stage has finished, the rollout engine's measured speed: ``p = tok/s_ref / tok/s_here``
  (``rollout.engine=auto`` measures it before the first stage; 1 where nothing was measured);
- once stages finish, the trainings' own: ``p = median over runs of (wall seconds per stage here /
  reference seconds per stage)``, a stage's wall time taken from when its record reached the run's
  ``metrics.jsonl`` (so the checkpoint written after each stage counts);
- ``p_tail``: the evaluations' pace once one has run (measured / reference), else ``p``.

A run in progress is charged its remaining stages at its own measured seconds per stage. Each lane runs
its pieces one after the other, so a lane's time left is the sum of its pieces'; the two lanes run at
once, so the training's time left is the longer lane's. Nothing here reads a clock: the caller passes
the times (:class:`Progress`), so the arithmetic is tested without waiting.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Optional

#: reference seconds on the README's machine (2 idle cores, AMD EPYC Zen 5; the fresh clone's quickstart of
#: docs/results_speed.md at 1a714b9 and a re-run; the evaluations at 200 held-out problems): each run's start (model, optimiser, SAT-Seq's first certificate), a stage
#: (median wall), its end (last checkpoint, SAT-Seq's closing certificate); the warm start's evaluation
#: in a lane (one thread); the three evaluations after the trainings (two threads); the rollout speed
REFERENCE = {
    "toks": 3150.0,
    "warm_starts": 1.0,
    "before": 20.0,
    "runs": {"sat_seq": (10.0, 4.4, 6.0), "grpo": (3.0, 1.25, 1.0), "shared_policy": (3.0, 3.7, 2.0)},
    "tail": {"sat_seq_eval": 7.8, "shared_eval": 9.8, "grpo_eval": 9.7},
}


def duration(seconds: float) -> str:
    m, s = divmod(int(round(max(seconds, 0.0))), 60)
    return f"{m} min {s:02d} s" if m else f"{s} s"


@dataclass
class RunTrack:
    """One training run's progress: its stages, and (wall time, stages done) when its count last grew."""
    method: str
    stages: int
    done: int = 0
    first: Optional[tuple[float, int]] = None  # (time, stages) when a stage was first seen done
    last: Optional[tuple[float, int]] = None

    def observe(self, done: int, at: float) -> None:
        if done > self.done or (done and self.first is None):
            self.done = done
            self.last = (at, done)
            if self.first is None:
                self.first = (at, done)

    def seconds_per_stage(self) -> Optional[float]:
        """Measured wall seconds per stage, over at least two stages; None before."""
        if self.first is None or self.last is None or self.last[1] - self.first[1] < 2:
            return None
        return (self.last[0] - self.first[0]) / (self.last[1] - self.first[1])


@dataclass
class Progress:
    """What the quickstart knows at one moment: the lanes (each a list of pieces, ``"before"`` or a run's
    method), each run's :class:`RunTrack`, whether the warm start's evaluation has finished and for how
    long it has been running, the evaluations to come and the seconds the finished ones took."""
    lanes: list[list[str]]
    runs: dict[str, RunTrack]
    before_done: bool = False
    before_elapsed: float = 0.0
    tail_left: list[str] = field(default_factory=list)
    tail_spent: dict[str, float] = field(default_factory=dict)
    eval_scale: float = 1.0  # held-out problems / the reference's (the evaluations scale with it)
    toks: Optional[float] = None  # the rollout engine's measured generated tokens per second
    now: Optional[float] = None  # the time of this estimate, on the runs' clock (what RunTrack.observe got)


def pace(prog: Progress, ref: dict = REFERENCE) -> float:
    """This machine's seconds per reference second (see the module docstring)."""
    ratios = [r.seconds_per_stage() / ref["runs"][m][1] for m, r in prog.runs.items()
              if r.seconds_per_stage() is not None]
    if ratios:
        return statistics.median(ratios)
    return ref["toks"] / prog.toks if prog.toks else 1.0


def _run_left(r: RunTrack, p: float, ref: dict, now: Optional[float]) -> float:
    """A run's seconds left: its stages to come at its measured seconds per stage, and its end; less the
    time since its last stage ended (that much of the next one is done), down to nothing."""
    start, stage, end = ref["runs"][r.method]
    if r.done >= r.stages:
        return 0.0
    measured = r.seconds_per_stage()
    if r.done == 0:
        return p * (start + r.stages * stage + end)
    left = (r.stages - r.done) * (measured if measured is not None else p * stage) + p * end
    since = now - r.last[0] if now is not None and r.last is not None else 0.0
    return max(left - since, 0.0)


def seconds_left(prog: Progress, ref: dict = REFERENCE) -> float:
    p = pace(prog, ref)
    lanes = []
    for lane in prog.lanes:
        left = 0.0
        for piece in lane:
            if piece == "before":
                if not prog.before_done:
                    left += max(p * ref["before"] * prog.eval_scale - prog.before_elapsed, 0.0)
            else:
                left += _run_left(prog.runs[piece], p, ref, prog.now)
        lanes.append(left)
    spent = {k: v for k, v in prog.tail_spent.items() if k in ref["tail"]}
    p_tail = sum(spent.values()) / (prog.eval_scale * sum(ref["tail"][k] for k in spent)) if spent else p
    tail = p_tail * prog.eval_scale * sum(ref["tail"][k] for k in prog.tail_left)
    return max(lanes, default=0.0) + tail
