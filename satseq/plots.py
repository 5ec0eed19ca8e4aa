"""The training dashboard: ``satseq plot RUN_DIR`` draws six panels from ``metrics.jsonl`` to a PNG.

Three layouts, chosen by ``run_info.json``'s ``method`` (inferred from the metric names if absent);
SAT-Seq's is here, PAG's in :mod:`satseq.plots_pag`, MLMT-RL's in :mod:`satseq.plots_mlmt`:

* ``sat_seq`` (docs/sat_seq.md, Metrics): loss per agent; training accuracy per agent and the
  majority vote (plus held-out ``eval/...`` points); the KL quantile per agent against the target
  KL (``algorithm.kl_ctrl.target_kl`` of ``train_config.yaml``); β per agent (log scale);
  backtracks per agent with rejected updates marked; the certificate lower bound and its summed
  parts S / OCC / BIAS / FS.
* PAG / A*-PO / GRPO (spec apo_pag.md, Metrics and the dashboard): training loss; Acc@t1 vs
  Acc@final; verifier accuracy with correct / wrong recall; answer change ratio with the collapse
  threshold; revision rate; V* histogram (``vstar.json``). Runs without the PAG metrics degrade
  gracefully: the policy accuracy stands in for Acc@t1 and a panel with nothing logged says so.
* ``mlmt``: loss per role; accuracy after turn 1 and turn 3; the coach's accuracy and how often it is
  followed; the coach reward and its parts; KL to the reference per role; improvement / degradation.

Noisy curves are drawn as a light raw line plus a moving average in the same colour. The PNG is
written atomically (temporary sibling, then ``os.replace``) with the Agg canvas, never pyplot, so
the module is safe to use from any process and leaves matplotlib's global state alone.
:func:`collapse_warning` needs no matplotlib.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from satseq.tracking import read_metrics
from satseq.utils.io import atomic_write

DEFAULT_TARGET_KL = 0.05
COLLAPSE_THRESHOLD = 0.5
SMOOTH_WINDOW = 5
NOT_LOGGED = "not logged in this run"

_NON_AGENT_PREFIXES = {"rollout", "eval", "pag", "apo", "certificate", "time", "stage", "step"}
_CERT_PARTS = ("S", "OCC", "BIAS", "FS")


# --------------------------------------------------------------------------- data helpers
def _num(value: Any) -> Optional[float]:
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
        v = _num(row.get(key))
        if v is None:
            continue
        step = _num(row.get("step"))
        xs.append(step if step is not None else float(i))
        ys.append(v)
    return xs, ys


def _summed(rows: Sequence[dict], keys: Sequence[str]) -> tuple[list[float], list[float]]:
    """Per row, the sum of those ``keys`` present (rows with none of them are skipped)."""
    xs: list[float] = []
    ys: list[float] = []
    for i, row in enumerate(rows):
        vals = [v for v in (_num(row.get(k)) for k in keys) if v is not None]
        if not vals:
            continue
        step = _num(row.get("step"))
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


def _read_json(path: Path) -> Optional[Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _target_kl(run_dir: Path) -> float:
    """``algorithm.kl_ctrl.target_kl`` of the run's ``train_config.yaml`` (default 0.05)."""
    path = run_dir / "train_config.yaml"
    try:
        import yaml

        cfg = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        value = _num(cfg["algorithm"]["kl_ctrl"]["target_kl"])
    except Exception:  # absent, unreadable or without the key: the default
        return DEFAULT_TARGET_KL
    return value if value is not None else DEFAULT_TARGET_KL


def _all_keys(rows: Iterable[dict]) -> list[str]:
    seen: dict[str, None] = {}
    for row in rows:
        for k in row:
            seen.setdefault(k, None)
    return list(seen)


def _run_info(run_dir: Path, rows: Sequence[dict]) -> tuple[str, list[str]]:
    """(method, agents) from ``run_info.json``, else inferred from the metric names."""
    info = _read_json(run_dir / "run_info.json")
    info = info if isinstance(info, dict) else {}
    keys = _all_keys(rows)
    method = info.get("method")
    if not isinstance(method, str):
        if any(k.startswith("certificate/") or k.endswith("/kl_quantile") for k in keys):
            method = "sat_seq"
        elif any(k.startswith("pag/") for k in keys):
            method = "pag"
        elif any(k.startswith("mlmt/") for k in keys):
            method = "mlmt"
        else:
            method = "grpo"
    agents = info.get("agents")
    if not (isinstance(agents, list) and all(isinstance(a, str) for a in agents) and agents):
        agents = []
        for k in keys:
            head, sep, tail = k.partition("/")
            if sep and "/" not in tail and head not in _NON_AGENT_PREFIXES and head not in agents \
                    and tail in ("accuracy", "loss"):
                agents.append(head)
    return method, agents


# --------------------------------------------------------------------------- drawing helpers
def _colors(n: int) -> list[str]:
    base = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
            "#bcbd22", "#17becf"]
    return [base[i % len(base)] for i in range(n)]


def _curve(ax, xs, ys, color, label, *, smooth: bool = True, **kw) -> None:
    """A light raw line plus its moving average (solid, labelled) in the same colour."""
    if len(xs) == 1:
        ax.plot(xs, ys, "o", color=color, label=label, **kw)
        return
    if smooth and len(xs) > SMOOTH_WINDOW:
        ax.plot(xs, ys, color=color, alpha=0.3, lw=1.0)
        ax.plot(xs, moving_average(ys), color=color, lw=2.0, label=label, **kw)
    else:
        ax.plot(xs, ys, color=color, lw=1.8, label=label, marker="o" if len(xs) <= 20 else None, ms=3, **kw)


def _note(ax, text: str = NOT_LOGGED) -> None:
    """Replace an empty axis by a centred note."""
    ax.set_xticks([])
    ax.set_yticks([])
    for side in ax.spines.values():
        side.set_color("#bbbbbb")
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=12,
            color="#777777", style="italic")


def _finish(ax, title: str, xlabel: str, ylabel: str, *, legend: bool = True, min_entries: int = 2,
            ncol: int = 1) -> None:
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


def _unit_range(ax) -> None:
    ax.set_ylim(-0.03, 1.03)


# --------------------------------------------------------------------------- SAT-Seq layout
def _sat_seq_panels(axes, rows, agents, run_dir: Path) -> None:
    colors = _colors(max(len(agents), 1) + 2)
    x_label = "stage"

    # (1) loss per agent
    ax = axes[0]
    drawn = False
    for agent, c in zip(agents, colors):
        xs, ys = series(rows, f"{agent}/loss")
        if xs:
            _curve(ax, xs, ys, c, agent)
            drawn = True
    if drawn:
        ax.axhline(0.0, color="#999999", lw=0.8)
        _finish(ax, "Training loss", x_label, "surrogate loss (per token)")
    else:
        _note(ax)
        _finish(ax, "Training loss", x_label, "surrogate loss (per token)")

    # (2) training accuracy per agent + vote (+ held-out)
    ax = axes[1]
    drawn = False
    for agent, c in zip(agents, colors):
        xs, ys = series(rows, f"{agent}/accuracy")
        if xs:
            _curve(ax, xs, ys, c, agent)
            drawn = True
        ex, ey = series(rows, f"eval/{agent}/accuracy")
        if ex:
            ax.plot(ex, ey, "s--", color=c, ms=5, lw=1.2, label=f"{agent} (held-out)")
            drawn = True
    xs, ys = series(rows, "rollout/vote_accuracy")
    if xs:
        _curve(ax, xs, ys, "black", "majority vote")
        drawn = True
    ex, ey = series(rows, "eval/vote_accuracy")
    if ex:
        ax.plot(ex, ey, "D--", color="black", ms=5, lw=1.2, label="vote (held-out)")
        drawn = True
    if drawn:
        _unit_range(ax)
    else:
        _note(ax)
    _finish(ax, "Accuracy (train rollouts)", x_label, "accuracy (fraction correct)")

    # (3) KL quantile per agent vs target
    ax = axes[2]
    target = _target_kl(run_dir)
    drawn = False
    positive = True
    for agent, c in zip(agents, colors):
        xs, ys = series(rows, f"{agent}/kl_quantile")
        if xs:
            _curve(ax, xs, ys, c, agent)
            positive = positive and min(ys) > 0
            drawn = True
    if drawn:
        ax.axhline(target, color="#d62728", ls="--", lw=1.5, label=f"target KL = {target:g}")
        if positive:
            ax.set_yscale("log")
    else:
        _note(ax)
    _finish(ax, "KL quantile per update", x_label, "KL quantile (nats / token)")

    # (4) beta per agent (log)
    ax = axes[3]
    drawn = False
    all_pos = True
    for i, (agent, c) in enumerate(zip(agents, colors)):
        xs, ys = series(rows, f"{agent}/beta")
        if xs:
            # identical β curves overlap exactly: distinct dash styles keep each agent visible
            ax.plot(xs, ys, color=c, lw=2.0, label=agent, ls=["-", "--", ":", "-."][i % 4])
            all_pos = all_pos and min(ys) > 0
            drawn = True
    if drawn:
        ax.set_yscale("log" if all_pos else "symlog")
    else:
        _note(ax)
    _finish(ax, "KL coefficient β", x_label, "β (log scale)")

    # (5) backtracks per agent, rejections marked
    ax = axes[4]
    drawn = False
    n_rej_total = 0
    bt_max = 0.0
    width = 0.8 / max(len(agents), 1)
    for i, (agent, c) in enumerate(zip(agents, colors)):
        xs, ys = series(rows, f"{agent}/backtracks")
        if xs:
            off = (i - (len(agents) - 1) / 2) * width
            ax.bar([x + off for x in xs], ys, width=width, color=c, alpha=0.85, label=f"{agent} backtracks")
            bt_max = max(bt_max, max(ys))
            drawn = True
        ax_, acc = series(rows, f"{agent}/accepted")
        rej = [x for x, a in zip(ax_, acc) if a == 0]
        if ax_:
            drawn = True
        if rej:
            n_rej_total += len(rej)
            bt = dict(zip(xs, ys)) if xs else {}
            ax.plot(rej, [bt.get(x, 0.0) + 0.15 for x in rej], "x", color=c, ms=9, mew=2.2,
                    label=f"{agent} rejected ({len(rej)})")
    if drawn:
        ax.set_ylim(0, (max(bt_max, 1.0) + 0.3) * 1.4)  # headroom: × marks and the legend above the bars
        any_bt = bt_max > 0
        if n_rej_total == 0 or not any_bt:
            note = " · ".join(t for t, cond in (("no backtracks", not any_bt),
                                                  ("no rejected updates", n_rej_total == 0)) if cond)
            ax.text(0.5, 0.5 if not any_bt else 0.93, note, transform=ax.transAxes, ha="center", va="center",
                    fontsize=11, color="#555555", style="italic")
        ax.yaxis.get_major_locator().set_params(integer=True)
    else:
        _note(ax)
    _finish(ax, "Backtracks and rejected updates (×)", x_label, "backtracks (count)")

    # (6) certificate
    ax = axes[5]
    drawn = False
    xs, ys = series(rows, "certificate/lower_bound")
    if xs:
        _curve(ax, xs, ys, "black", "lower bound", smooth=False)
        drawn = True
    part_colors = _colors(6)[1:]
    for part, c in zip(_CERT_PARTS, part_colors):
        px, py = _summed(rows, [f"certificate/{a}/{part}" for a in agents])
        if px:
            _curve(ax, px, py, c, f"Σ {part}")
            drawn = True
    if drawn:
        ax.axhline(0.0, color="#999999", lw=0.8)
    else:
        _note(ax)
    _finish(ax, "Improvement certificate", x_label, "value (reward units)", ncol=3)


# --------------------------------------------------------------------------- entry point
def plot_dashboard(run_dir: str | Path, out: Optional[Path] = None) -> Path:
    """Draw the six-panel dashboard of ``run_dir`` to ``out`` (default ``run_dir/dashboard.png``).

    Raises ``ValueError`` when the run has no metrics (the CLI checks first and reports it)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    run_dir = Path(run_dir)
    rows = read_metrics(run_dir)
    if not rows:
        raise ValueError(f"{run_dir / 'metrics.jsonl'}: no metrics")
    rows = sorted(rows, key=lambda r: (_num(r.get("step")) is None, _num(r.get("step")) or 0.0))
    method, agents = _run_info(run_dir, rows)
    out = Path(out) if out is not None else run_dir / "dashboard.png"

    fig = Figure(figsize=(16, 9), dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 3).ravel()
    if method == "sat_seq":
        _sat_seq_panels(axes, rows, agents, run_dir)
        layout = "SAT-Seq"
    elif method == "mlmt":
        from satseq.plots_mlmt import mlmt_panels

        mlmt_panels(axes, rows, agents, run_dir)
        layout = "MLMT-RL"
    else:
        from satseq.plots_pag import pag_panels

        pag_panels(axes, rows, agents, run_dir)
        layout = {"apo": "A*-PO", "pag": "PAG", "grpo": "GRPO"}.get(method, method)
    steps = [s for s in (_num(r.get("step")) for r in rows) if s is not None]
    span = f"steps {int(min(steps))}–{int(max(steps))}" if steps else f"{len(rows)} rows"
    fig.suptitle(f"{run_dir.resolve().name} — {layout} ({span})", fontsize=15, fontweight="bold")
    fig.tight_layout(rect=(0, 0, 1, 0.965), h_pad=2.0, w_pad=1.5)

    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(out, "wb") as fh:
        _save_png(fig, fh)
    try:  # mkstemp made it private (0600); a dashboard is an ordinary file
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(out, 0o666 & ~umask)
    except OSError:
        pass
    return out


def _save_png(fig, fh) -> None:
    """PNG quantized to a 256-colour palette (a third of the RGBA size, same look); plain if Pillow fails."""
    try:
        from PIL import Image

        canvas = fig.canvas
        canvas.draw()
        img = Image.frombuffer("RGBA", canvas.get_width_height(), canvas.buffer_rgba(), "raw", "RGBA", 0, 1)
        img.convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT).save(fh, format="PNG", optimize=True)
    except Exception:  # pragma: no cover - Pillow is a matplotlib dependency
        fh.seek(0)
        fh.truncate()
        fig.savefig(fh, format="png", dpi=fig.dpi)


__all__ = ["collapse_warning", "moving_average", "plot_dashboard", "series"]
