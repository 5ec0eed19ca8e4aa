"""What every dashboard layout shares: reading metrics, drawing curves, notes and panels.

The layouts live with their methods (``satseq/methods/<name>/dashboard.py``) and import only this
module; :mod:`satseq.plotting.dashboard` draws the figure and asks the method registry for the layout.

* data: :func:`num` (a finite float or None), :func:`series` ((steps, values) of one metric, sparse
  keys skip rows), :func:`summed` (per row, the sum of several metrics), :func:`moving_average`,
  :func:`all_keys`, :func:`read_json`, :func:`collapse_warning` (the answer change ratio check that
  ``satseq plot`` prints; needs no matplotlib);
* drawing on a matplotlib ``Axes``: :func:`colors`, :func:`curve` (noisy curves are a light raw line
  plus a moving average in the same colour), :func:`held_out_points` (sparse ``eval/...`` points),
  :func:`note` (an empty panel says :data:`NOT_LOGGED`), :func:`finish` (title, labels, grid,
  legend), :func:`unit_range`, and :func:`draw_panel`, the common panel: curves of some metrics
  with their held-out points, optional reference lines and warning, or the note when none was logged.

Nothing here imports matplotlib: the functions draw on the axes they are given.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

COLLAPSE_THRESHOLD = 0.5
SMOOTH_WINDOW = 5
NOT_LOGGED = "not logged in this run"
X_LABEL = "training step"


# --------------------------------------------------------------------------- data helpers
def num(value: Any) -> Optional[float]:
    """A finite float, or None (missing, None, NaN, strings)."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def series(rows: Sequence[dict], key: str) -> tuple[list[float], list[float]]:
    """(steps, values) of the rows where ``key`` holds a finite number (sparse keys skip rows)."""
    xs: list[float] = []
    ys: list[float] = []
    for i, row in enumerate(rows):
        v = num(row.get(key))
        if v is None:
            continue
        step = num(row.get("step"))
        xs.append(step if step is not None else float(i))
        ys.append(v)
    return xs, ys


def summed(rows: Sequence[dict], keys: Sequence[str]) -> tuple[list[float], list[float]]:
    """Per row, the sum of those ``keys`` present (rows with none of them are skipped)."""
    xs: list[float] = []
    ys: list[float] = []
    for i, row in enumerate(rows):
        vals = [v for v in (num(row.get(k)) for k in keys) if v is not None]
        if not vals:
            continue
        step = num(row.get("step"))
        xs.append(step if step is not None else float(i))
        ys.append(sum(vals))
    return xs, ys


def moving_average(values: Sequence[float], window: int = SMOOTH_WINDOW) -> list[float]:
    """Trailing mean over up to ``window`` points (the first points average what exists)."""
    out: list[float] = []
    acc = 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def collapse_warning(rows: Sequence[dict], threshold: float = COLLAPSE_THRESHOLD,
                     window: int = SMOOTH_WINDOW, key: str = "pag/answer_change_ratio") -> Optional[str]:
    """A warning line when the mean of the last ``window`` answer-change-ratio values is below
    ``threshold`` (revisions that repeat the first answer: a possibly collapsed self-correction);
    None when it is not, or when the run logs no answer change ratio."""
    _, ys = series(rows, key)
    if not ys:
        return None
    last = ys[-window:]
    mean = sum(last) / len(last)
    if mean < threshold:
        return (f"answer change ratio {mean:.3f} (mean of the last {len(last)} logged) < {threshold:g}: "
                "revisions mostly repeat the first answer (possible self-correction collapse)")
    return None


def read_json(path: Path) -> Optional[Any]:
    """The parsed JSON file, or None when it is absent or unreadable."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def all_keys(rows: Iterable[dict]) -> list[str]:
    """Every metric name in ``rows``, in order of first appearance."""
    seen: dict[str, None] = {}
    for row in rows:
        for k in row:
            seen.setdefault(k, None)
    return list(seen)


# --------------------------------------------------------------------------- drawing helpers
def colors(n: int) -> list[str]:
    """``n`` colours of matplotlib's default cycle (repeating after ten)."""
    base = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
            "#bcbd22", "#17becf"]
    return [base[i % len(base)] for i in range(n)]


def curve(ax, xs, ys, color, label, *, smooth: bool = True, **kw) -> None:
    """A light raw line plus its moving average (solid, labelled) in the same colour."""
    if len(xs) == 1:
        ax.plot(xs, ys, "o", color=color, label=label, **kw)
        return
    if smooth and len(xs) > SMOOTH_WINDOW:
        ax.plot(xs, ys, color=color, alpha=0.3, lw=1.0)
        ax.plot(xs, moving_average(ys), color=color, lw=2.0, label=label, **kw)
    else:
        ax.plot(xs, ys, color=color, lw=1.8, label=label, marker="o" if len(xs) <= 20 else None, ms=3, **kw)


def held_out_points(ax, xs, ys, color, label, marker: str = "s") -> None:
    """Sparse held-out (``eval/...``) points: dashed, marked, labelled ``label``."""
    ax.plot(xs, ys, f"{marker}--", color=color, ms=5, lw=1.2, label=label)


def note(ax, text: str = NOT_LOGGED) -> None:
    """Replace an empty axis by a centred note."""
    ax.set_xticks([])
    ax.set_yticks([])
    for side in ax.spines.values():
        side.set_color("#bbbbbb")
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=12,
            color="#777777", style="italic")


def finish(ax, title: str, xlabel: str, ylabel: str, *, legend: bool = True, min_entries: int = 2,
           ncol: int = 1) -> None:
    """Title, axis labels, grid, scientific y ticks; a legend when it has at least ``min_entries``."""
    ax.set_title(title, fontsize=12, fontweight="bold")
    ax.set_xlabel(xlabel, fontsize=10)
    ax.set_ylabel(ylabel, fontsize=10)
    ax.tick_params(labelsize=9)
    ax.grid(True, alpha=0.3)
    if ax.get_yscale() == "linear" and ax.has_data():
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 4), useMathText=True)
    if legend:
        handles, labels = ax.get_legend_handles_labels()
        if handles and len(handles) >= min_entries:
            ax.legend(fontsize=8.5, loc="best", framealpha=0.85, ncol=max(ncol, 2 if len(handles) > 6 else 1))


def unit_range(ax) -> None:
    """A y axis for fractions: [0, 1] with a small margin."""
    ax.set_ylim(-0.03, 1.03)


def draw_panel(ax, rows: Sequence[dict], curves: Iterable[tuple[str, str, str]], *, title: str, ylabel: str,
               xlabel: str = X_LABEL, unit: bool = False, held_out: bool = True, zero_line: bool = False,
               thresholds: Sequence[tuple[float, str]] = (), warning: Optional[str] = None,
               min_entries: int = 1) -> None:
    """One panel: ``curves`` are (metric key, colour, label), each drawn with :func:`curve`, followed by
    its held-out ``eval/<key>`` points when ``held_out`` and logged. When anything was drawn:
    ``unit`` fixes the y axis to [0, 1], ``zero_line`` adds a grey line at 0, each (value, label) of
    ``thresholds`` a labelled red dashed line, and ``warning`` a red line of text at the bottom left.
    When nothing was logged the panel says so (:func:`note`). Then :func:`finish` (a legend from
    ``min_entries`` entries)."""
    drawn = False
    for key, color, label in curves:
        xs, ys = series(rows, key)
        if xs:
            curve(ax, xs, ys, color, label)
            drawn = True
        ex, ey = series(rows, f"eval/{key}") if held_out else ([], [])
        if ex:
            held_out_points(ax, ex, ey, color, f"{label} (held-out)")
            drawn = True
    if not drawn:
        note(ax)
    else:
        for value, label in thresholds:
            ax.axhline(value, color="#d62728", ls="--", lw=1.5, label=label)
        if unit:
            unit_range(ax)
        if zero_line:
            ax.axhline(0.0, color="#999999", lw=0.8)
        if warning:
            ax.text(0.02, 0.04, warning, transform=ax.transAxes, fontsize=9.5, color="#d62728", fontweight="bold")
    finish(ax, title, xlabel, ylabel, min_entries=min_entries)


__all__ = ["COLLAPSE_THRESHOLD", "NOT_LOGGED", "SMOOTH_WINDOW", "X_LABEL", "all_keys", "collapse_warning", "colors",
           "curve", "draw_panel", "finish", "held_out_points", "moving_average", "note", "num", "read_json", "series",
           "summed", "unit_range"]
