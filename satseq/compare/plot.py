"""``comparison.png``: held-out accuracy against generated samples and against training wall-clock.

Per run, the seeds' curves (the trainer's held-out evaluation every ``curve_every`` stages, one sampled
episode per problem) are interpolated onto a common grid over the range every seed covers; the line
is their mean and the band ± one standard error over seeds (no band with one seed). A marker with an
error bar at each run's mean totals is the final evaluation (``eval.n`` samples per problem; mean ±
s.e. over seeds, or the run's own s.e. with one seed). Dotted horizontal lines: the warm starts.
Matplotlib's Agg backend; written atomically.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

AXES = (("samples", "generated samples (turns)"), ("seconds", "training wall-clock (s, summed stage time)"))
GRID = 40


def _band(curves: list[tuple[list[float], list[float]]]):
    """(grid, mean, se) of several (x, y) curves over the x range they all cover; None if empty."""
    import numpy as np

    curves = [(x, y) for x, y in curves if len(x) > 0]
    if not curves:
        return None
    lo, hi = max(x[0] for x, _ in curves), min(x[-1] for x, _ in curves)
    if len(curves) == 1 or hi <= lo:
        x, y = curves[0]
        return np.asarray(x, float), np.asarray(y, float), None
    grid = np.linspace(lo, hi, GRID)
    ys = np.array([np.interp(grid, x, y) for x, y in curves])
    return grid, ys.mean(0), ys.std(0, ddof=1) / math.sqrt(len(ys))


def plot_comparison(results: dict[str, list[dict]], warm: dict[str, Optional[dict]], path: Path,
                    budget: str = "") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from satseq.utils.io import atomic_write

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    drawn_warm: set[str] = set()
    for i, (name, seeds) in enumerate(results.items()):
        color = f"C{i % 10}"
        for ax, (xkey, xlabel) in zip(axes, AXES):
            band = _band([(s["curve"][xkey], s["curve"]["acc"]) for s in seeds])
            if band is not None:
                x, mean, se = band
                ax.plot(x, mean, color=color, label=name)
                if se is not None:
                    ax.fill_between(x, mean - se, mean + se, color=color, alpha=0.2)
            accs = [s["eval"]["accuracy"]["mean"] for s in seeds]
            m = sum(accs) / len(accs)
            err = (math.sqrt(sum((a - m) ** 2 for a in accs) / (len(accs) - 1) / len(accs)) if len(accs) > 1
                   else (seeds[0]["eval"]["accuracy"].get("se") or 0.0))
            total = sum(s["samples" if xkey == "samples" else "train_s"] for s in seeds) / len(seeds)
            ax.errorbar([total], [m], yerr=[err], color=color, marker="o", capsize=3,
                        label=None if band is not None else name)
    for name, w in warm.items():
        if w and w["dir"] not in drawn_warm:
            drawn_warm.add(w["dir"])
            starts = ", ".join(n for n, v in warm.items() if v and v["dir"] == w["dir"])
            for ax in axes:
                ax.axhline(w["eval"]["accuracy"]["mean"], color="0.5", ls=":", lw=1)
            axes[0].annotate(f"warm start of {starts}", (0, w["eval"]["accuracy"]["mean"]),
                             fontsize=7, color="0.4", va="bottom")
    for ax, (_, xlabel) in zip(axes, AXES):
        ax.set_xlim(left=0)  # the warm start (dotted) is where every run starts
        ax.set_xlabel(xlabel)
        ax.set_ylabel("held-out accuracy (final answer)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"satseq compare — mean ± s.e. over seeds; dots: final evaluation" + (f"; budget {budget}" if budget else ""),
                 fontsize=10)
    fig.tight_layout()
    with atomic_write(path, "wb", encoding=None) as f:
        fig.savefig(f, format="png", dpi=100)
    plt.close(fig)
    return Path(path)
