"""Stability statistics of one compared run, from its ``metrics.jsonl`` rows and its final evaluation
(docs/compare.md, "Stability"). Pure functions; :func:`run_stability` is the whole record of one
(cell, seed), :func:`over_seeds` its summary over seeds.

* **Initial / final value** of a per-stage series: the initial value is stage 0's, whose rollout was
  sampled from the warm start (before any update); the final value is the mean over the last
  ``max(1, ⌈n / 10⌉)`` of the ``n`` logged stages (:func:`final_value`), so that one noisy stage
  neither makes nor hides a collapse.
* **Collapse** (:func:`run_stability`), any of:
  - *accuracy*: the final held-out accuracy (the comparison's final evaluation) is below the warm
    start's, evaluated the same way (``final < warm``, no margin; None without a warm start);
  - *length*: for some role, the final mean response length (``<role>/response_length``, tokens) is
    below ``LENGTH_FLOOR`` = 0.5 × its initial value;
  - *entropy*: for some role, the final per-token entropy is below ``ENTROPY_FLOOR`` = 0.1 × its
    initial value **and** the held-out accuracy did not rise (``final <= warm``, or no warm start to
    tell). The entropy is ``<role>/sampled_entropy``: the mean of −log π_b(y_t) over the
    stage's sampled response tokens (the engine's behaviour log-probs), a one-sample estimate of the
    sampling policy's entropy, ``E_{y~π}[−log π(y)] = H(π)`` (logged by :func:`satseq.loop.rollout_metrics`).
    A policy whose entropy falls while its held-out accuracy rises above the warm start's is
    *sharpening* (a small model concentrating on the answers that are right, the usual course of RL on
    a verifiable reward), not collapsing: it is recorded under ``sharpened`` and not flagged.
* **KL between consecutive policies**: ``kl_step_q99`` and ``kl_step_max`` are the largest, over
  stages and agents, of ``<agent>/kl_step_q99`` (the 0.99 quantile over the stage's response tokens)
  and ``<agent>/kl_step_max`` (their max) of the per-token k3 estimate of KL(π_old ‖ π_new) across
  one stage's update, at the batch's own tokens (the ones the update was fit to, so above the
  per-state KL at fresh samples) (:mod:`satseq.update.step_kl`; logged with ``trainer.step_kl``, which
  ``satseq compare`` turns on). None when the run did not log them (A*-PO).
* **SAT-Seq** (:func:`sat_seq_stats`, from ``<agent>/accepted``, ``/backtracks``, ``/step_scale``):
  over every (stage, agent) update: the number of updates, backtracks summed, updates shrunk
  (accepted with ≥ 1 backtrack), updates rejected, and the step scale α^j (0 = rejected): its mean
  and minimum.
* **Final and best held-out accuracy**: ``final`` is the final evaluation (``eval.n`` samples of
  ``eval.problems`` problems); ``best`` is the maximum over the trainer's periodic held-out
  evaluation (every ``curve_every`` stages, one sampled episode per ``data.eval_size`` problem), a
  noisier measurement, biased upwards as a maximum; ``curve_last`` is that evaluation's last point,
  the one to set ``best`` against.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

from satseq.utils.stats import mean_se

LENGTH_FLOOR = 0.5     # collapse: final response length < 0.5 × stage 0's
ENTROPY_FLOOR = 0.1    # collapse: final per-token entropy < 0.1 × stage 0's
FINAL_WINDOW = 0.1     # the final value: the mean over the last 10 % of the logged stages (at least one)
LENGTH_KEY, ENTROPY_KEY = "response_length", "sampled_entropy"


def _sorted(rows: list[dict]) -> list[dict]:
    return sorted((r for r in rows if isinstance(r.get("step"), (int, float))), key=lambda r: r["step"])


def role_series(rows: list[dict], metric: str) -> dict[str, list[float]]:
    """``{role: [value per logged stage, in stage order]}`` of the per-role keys ``<role>/<metric>``."""
    out: dict[str, list[float]] = {}
    for r in _sorted(rows):
        for k, v in r.items():
            if k.count("/") == 1 and k.endswith("/" + metric) and isinstance(v, (int, float)) and \
                    not k.startswith(("eval/", "rollout/", "time/")):
                out.setdefault(k.split("/")[0], []).append(float(v))
    return out


def final_value(values: Sequence[float]) -> Optional[float]:
    """The mean of the last ``max(1, ⌈n · FINAL_WINDOW⌉)`` values (None if empty)."""
    if not values:
        return None
    w = max(1, math.ceil(len(values) * FINAL_WINDOW))
    tail = values[-w:]
    return sum(tail) / len(tail)


def final_ratios(rows: list[dict], metric: str) -> dict[str, float]:
    """``{role: final value / initial value}`` of ``<role>/<metric>`` (roles whose initial value is > 0)."""
    out = {}
    for role, vals in role_series(rows, metric).items():
        if vals and vals[0] > 0:
            out[role] = final_value(vals) / vals[0]
    return out


def largest(rows: list[dict], suffix: str) -> Optional[float]:
    """The maximum over stages and agents of the keys ending in ``suffix`` (None if none logged)."""
    vals = [float(v) for r in rows for k, v in r.items() if k.endswith(suffix) and isinstance(v, (int, float))]
    return max(vals) if vals else None


def sat_seq_stats(rows: list[dict]) -> Optional[dict]:
    """Over every (stage, agent) update of a SAT-Seq run: updates, backtracks (sum), shrunk and
    rejected updates, the mean and minimum step scale; None when the run logged no ``/backtracks``."""
    ups = []
    for r in _sorted(rows):
        for k, v in r.items():
            if k.endswith("/backtracks") and k.count("/") == 1:
                agent = k.split("/")[0]
                ups.append((float(r.get(f"{agent}/accepted", 1.0)), float(v), float(r.get(f"{agent}/step_scale", 1.0))))
    if not ups:
        return None
    return {"updates": len(ups), "backtracks": int(sum(b for _, b, _ in ups)),
            "shrunk": sum(1 for a, b, _ in ups if a > 0 and b > 0), "rejected": sum(1 for a, _, _ in ups if a == 0),
            "step_scale_mean": sum(s for *_, s in ups) / len(ups), "step_scale_min": min(s for *_, s in ups)}


def run_stability(rows: list[dict], final_acc: Optional[float], warm_acc: Optional[float],
                  curve_acc: Sequence[float] = ()) -> dict:
    """The stability record of one run (module docstring): accuracy (final, best, curve_last), the
    largest consecutive-policy KL, length and entropy ratios, SAT-Seq's step statistics, and
    ``collapse`` with its reasons."""
    length, entropy = final_ratios(rows, LENGTH_KEY), final_ratios(rows, ENTROPY_KEY)
    reasons = []
    acc_collapse = None if final_acc is None or warm_acc is None else final_acc < warm_acc
    if acc_collapse:
        reasons.append(f"accuracy {final_acc:.3f} < warm start {warm_acc:.3f}")
    reasons += [f"{role} length ×{x:.2f}" for role, x in length.items() if x < LENGTH_FLOOR]
    low_entropy = [f"{role} entropy ×{x:.2f}" for role, x in entropy.items() if x < ENTROPY_FLOOR]
    rose = final_acc is not None and warm_acc is not None and final_acc > warm_acc  # held-out accuracy rose
    if not rose:
        reasons += low_entropy
    return {
        "final": final_acc, "warm_start": warm_acc,
        "best": max(curve_acc) if curve_acc else None, "curve_last": curve_acc[-1] if curve_acc else None,
        "kl_step_q99": largest(rows, "/kl_step_q99"), "kl_step_max": largest(rows, "/kl_step_max"),
        "length_ratio": length, "entropy_ratio": entropy, "sat_seq": sat_seq_stats(rows),
        "collapse": {"accuracy": acc_collapse, "length": any(x < LENGTH_FLOOR for x in length.values()),
                     "entropy": bool(low_entropy) and not rose, "any": bool(reasons)},
        "collapse_reasons": reasons,
        "sharpened": low_entropy if rose else [],  # entropy below the floor while held-out accuracy rose
    }


def _ms(values) -> Optional[dict]:
    vals = [v for v in values if v is not None]
    return mean_se(vals) if vals else None


def over_seeds(stats: list[dict]) -> dict:
    """One cell's stability over its seeds: collapsed seeds (of how many), mean ± s.e. of final, best,
    the KL statistics and SAT-Seq's, and the smallest length / entropy ratio of any role and seed."""
    sat = [s["sat_seq"] for s in stats if s.get("sat_seq")]
    mins = {key: min((x for s in stats for x in s[key].values()), default=None) for key in ("length_ratio", "entropy_ratio")}
    return {
        "seeds": len(stats), "collapsed": sum(s["collapse"]["any"] for s in stats),
        "final": _ms([s["final"] for s in stats]), "best": _ms([s["best"] for s in stats]),
        "kl_step_q99": _ms([s["kl_step_q99"] for s in stats]), "kl_step_max": _ms([s["kl_step_max"] for s in stats]),
        "kl_step_max_max": max((s["kl_step_max"] for s in stats if s["kl_step_max"] is not None), default=None),
        "backtracks": _ms([x["backtracks"] for x in sat]) if sat else None,
        "shrunk": _ms([x["shrunk"] for x in sat]) if sat else None,
        "rejected": _ms([x["rejected"] for x in sat]) if sat else None,
        "step_scale_mean": _ms([x["step_scale_mean"] for x in sat]) if sat else None,
        "step_scale_min": min((x["step_scale_min"] for x in sat), default=None),
        "length_ratio_min": mins["length_ratio"], "entropy_ratio_min": mins["entropy_ratio"],
        "reasons": sorted({r for s in stats for r in s["collapse_reasons"]}),
        "sharpened": sum(bool(s.get("sharpened")) for s in stats),
    }
