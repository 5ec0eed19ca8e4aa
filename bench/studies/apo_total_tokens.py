"""A*-PO against GRPO at equal generated tokens with A*-PO's stage 1 counted, from a kept study's curves.

    python bench/studies/apo_total_tokens.py [bench/studies/smollm2_apo]

A `satseq compare` token budget counts what the training stages generate; A*-PO's stage 1 (``apo.n_samples``
samples of each of the ``data.train_size`` training prompts from the warm start, for V*) comes before the
first stage and is not in it (issue 65, item 5). This reads every kept run's ``metrics.jsonl`` and
``train_config.yaml``: stage 1's tokens are estimated as N × train_size × the tokens a warm-start sample
takes (the mean over every A*-PO run of its first stage's tokens per sample, sampled before any update),
and, per learning rate, each seed's held-out curve point (the trainer's periodic evaluation) at the last
stage whose tokens, stage 1 included, are within GRPO's budget, beside GRPO's at its last curve point.
Prints mean ± s.e. over seeds per cell and the difference of the best cells.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import yaml

CURVE = "eval/policy/accuracy"


def _rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def _mean_se(xs: list[float]) -> tuple[float, float]:
    """(mean, s.e.) of :func:`~satseq.utils.stats.mean_se`; s.e. NaN for one value."""
    from satseq.utils.stats import mean_se

    r = mean_se(xs)
    return r["mean"], (r["se"] if r["se"] is not None else float("nan"))


def stage1_tokens(study: Path) -> tuple[float, float]:
    """(estimated stage-1 tokens, tokens per warm-start sample) over the study's A*-PO runs."""
    per_sample, n_prompts = [], []
    for run in sorted(study.glob("apo@*_seed*")):
        first = _rows(run)[0]
        per_sample.append(first["rollout/generated_tokens"] / first["rollout/generated_samples"])
        cfg = yaml.safe_load((run / "train_config.yaml").read_text())
        n_prompts.append(cfg["apo"]["n_samples"] * cfg["data"]["train_size"])
    tps = sum(per_sample) / len(per_sample)
    return tps * sum(n_prompts) / len(n_prompts), tps


def curve_at(run: Path, budget: float, offset: float) -> float:
    """The last curve point whose cumulative generated tokens plus ``offset`` are within ``budget``."""
    tokens, point = offset, None
    for r in _rows(run):
        tokens += r.get("rollout/generated_tokens", 0)
        if tokens > budget:
            break
        if CURVE in r:
            point = r[CURVE]
    if point is None:
        raise ValueError(f"{run}: no curve point within {budget:.0f} tokens")
    return point


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("study", type=Path, nargs="?", default=Path(__file__).resolve().parent / "smollm2_apo")
    a = ap.parse_args()
    s1, tps = stage1_tokens(a.study)
    grpo_runs = sorted(a.study.glob("grpo@*_seed*"))
    budget = max(sum(r.get("rollout/generated_tokens", 0) for r in _rows(run)) for run in grpo_runs)
    print(f"stage 1: ≈ {s1:,.0f} tokens ({tps:.1f} a warm-start sample); GRPO's budget {budget:,.0f} tokens")
    cells: dict[tuple[str, str], list[float]] = {}
    for run in sorted(a.study.glob("*@*_seed*")):
        cell = run.name.rsplit("_seed", 1)[0]
        method, lr = cell.split("@")[0], cell.split("=", 1)[1]
        point = curve_at(run, budget, s1 if method == "apo" else 0.0)
        cells.setdefault((method, lr), []).append(point)
    best = {}
    for (method, lr), xs in sorted(cells.items(), key=lambda kv: (kv[0][0], float(kv[0][1]))):
        m, se = _mean_se(xs)
        print(f"{method:5s} lr {lr:>7s}: {m:.3f} ± {se:.3f} (seeds {', '.join(f'{x:.2f}' for x in xs)})")
        if method not in best or m > best[method][0]:
            best[method] = (m, se, lr)
    (ma, sa, la), (mg, sg, lg) = best["apo"], best["grpo"]
    print(f"best cells, stage 1 counted: A*-PO (lr {la}) − GRPO (lr {lg}) = {ma - mg:+.3f} ± {math.hypot(sa, sg):.3f}")


if __name__ == "__main__":
    main()
