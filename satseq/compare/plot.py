"""``comparison.png``: held-out accuracy against generated samples and against training wall-clock;
``sweep.png``: per swept run, the final held-out accuracy against the swept value.

Per run, the seeds' curves (the trainer's held-out evaluation every ``curve_every`` stages, one sampled
episode per problem) are interpolated onto a common grid over the range every seed covers; the line
is their mean and the band ± one standard error over seeds (no band with one seed). A marker with an
error bar at each run's mean totals is the final evaluation (``eval.n`` samples per problem; mean ±
s.e. over seeds, or the run's own s.e. with one seed). Dotted horizontal lines: the warm starts.

``sweep.png`` (:func:`plot_sweep`): one panel per run with a grid; x is its first swept key (log scale
when every value is a positive number and they span 10× or more; names: evenly spaced), one line per
combination of its other keys; the final evaluation's mean over seeds with ± one s.e. error bars
(filled markers), the best of the periodic held-out evaluation (hollow, dashed), and the warm start
(dotted). Matplotlib's Agg backend; each written atomically.
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


def _mean_err(values: list[float]) -> tuple[float, float]:
    m = sum(values) / len(values)
    err = math.sqrt(sum((a - m) ** 2 for a in values) / (len(values) - 1) / len(values)) if len(values) > 1 else 0.0
    return m, err


SWEEP_COLUMNS = 5  # panels per row of sweep.png


def plot_sweep(results: dict[str, list[dict]], warm: dict[str, Optional[dict]], sweeps: dict[str, list[str]],
               path: Path) -> Path:
    """``sweep.png``: per run in ``sweeps`` (``{run: [cells]}``), final accuracy against the swept value."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from satseq.compare.spec import value_label
    from satseq.utils.io import atomic_write

    n = len(sweeps)
    cols = min(n, SWEEP_COLUMNS)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.4 * cols, 3.6 * rows), squeeze=False, sharey=True)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for ax, (run, cells) in zip(axes.flat, sweeps.items()):
        keys = list(results[cells[0]][0]["point"])
        xs_all = [results[c][0]["point"][keys[0]] for c in cells]
        numeric = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs_all)
        order = sorted(set(xs_all)) if numeric else list(dict.fromkeys(xs_all))
        pos = (lambda x: x) if numeric else (lambda x: order.index(x))
        lines: dict[tuple, list[str]] = {}
        for c in cells:
            rest = tuple((k, results[c][0]["point"][k]) for k in keys[1:])
            lines.setdefault(rest, []).append(c)
        for i, (rest, members) in enumerate(lines.items()):
            color = f"C{i % 10}"
            label = ", ".join(f"{k}={value_label(v)}" for k, v in rest) or None
            members = sorted(members, key=lambda c: order.index(results[c][0]["point"][keys[0]]))
            x = [pos(results[c][0]["point"][keys[0]]) for c in members]
            finals = [_mean_err([s["eval"]["accuracy"]["mean"] for s in results[c]]) for c in members]
            ax.errorbar(x, [m for m, _ in finals], yerr=[e for _, e in finals], color=color, marker="o", capsize=3,
                        label=(label + ": final") if label else "final evaluation")
            bests = [[s["stability"]["best"] for s in results[c] if s.get("stability", {}).get("best") is not None]
                     for c in members]
            if all(bests):
                ax.plot(x, [sum(b) / len(b) for b in bests], color=color, marker="o", mfc="none", ls="--", lw=0.8,
                        label=(label + ": best") if label else "best (periodic eval)")
        w = warm.get(cells[0])
        if w:
            ax.axhline(w["eval"]["accuracy"]["mean"], color="0.5", ls=":", lw=1, label="warm start")
        if numeric and min(order) > 0 and max(order) / min(order) >= 10:
            ax.set_xscale("log")
        if not numeric:
            ax.set_xticks(range(len(order)), [value_label(v) for v in order])
        ax.set_xlabel(keys[0])
        ax.set_ylim(-0.03, 1.03)  # one scale for every panel: accuracies side by side
        ax.set_ylabel("held-out accuracy (final answer)")
        ax.set_title(f"{run} ({results[cells[0]][0]['method']})", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("satseq compare sweep: mean ± s.e. over seeds", fontsize=10)
    fig.tight_layout()
    with atomic_write(path, "wb", encoding=None) as f:
        fig.savefig(f, format="png", dpi=100)
    plt.close(fig)
    return Path(path)
