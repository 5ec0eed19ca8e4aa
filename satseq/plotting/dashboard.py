"""The training dashboard: ``satseq plot RUN_DIR`` draws six panels from ``metrics.jsonl`` to a PNG
(:func:`plot_dashboard`; :func:`plot_panels` writes each panel as its own PNG).

The layout is the run's method's: :func:`run_info` reads ``method`` from ``run_info.json`` (inferred
from the metric names when absent: the first registered method, in name order, with a
``metric_markers`` pattern that matches a logged metric; else the method that trains with the
``single`` workflow), and :func:`plot_dashboard` looks it up in the method registry
(:func:`satseq.registry.get_method`): ``m.dashboard(axes, rows, agents, run_dir)`` draws the
six panels (each method's in ``satseq/methods/<name>/dashboard.py``, which lists them) and
``m.title`` names the layout in the figure title (the method's name when empty). A method the
registry does not know (a run of a method registered outside satseq) is drawn with the default
method's layout under its own name. Nothing here names a method in code.

The PNG is written atomically (temporary sibling, then ``os.replace``) with the Agg canvas, never
pyplot, so the module is safe to use from any process and leaves matplotlib's global state alone.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional, Sequence

from satseq.errors import ConfigError
from satseq.registry import METHODS, discover, get_method, method_for_env
from satseq.plotting.common import all_keys, num, read_json
from satseq.tracking import read_metrics
from satseq.utils.io import atomic_write


def _default_method() -> str:
    return method_for_env("single").name

# Metric name heads that are not agents (``<agent>/accuracy``, ``<agent>/loss`` name the agents): the
# loop's, and each method's ``metric_prefixes``.
_COMMON_PREFIXES = {"rollout", "eval", "time", "stage", "step"}


def _non_agent_prefixes() -> set[str]:
    discover()
    return _COMMON_PREFIXES.union(*(getattr(m, "metric_prefixes", ()) for m in METHODS.values()))


def infer_method(keys: Sequence[str]) -> str:
    """The method the metric names ``keys`` belong to (the module docstring says how)."""
    discover()
    for name in sorted(METHODS):
        if any(re.search(p, k) for p in getattr(METHODS[name], "metric_markers", ()) for k in keys):
            return name
    return _default_method()


def run_info(run_dir: Path, rows: Sequence[dict]) -> tuple[str, list[str]]:
    """(method, agents) from ``run_info.json``, else inferred from the metric names."""
    info = read_json(Path(run_dir) / "run_info.json")
    info = info if isinstance(info, dict) else {}
    keys = all_keys(rows)
    method = info.get("method")
    if not isinstance(method, str):
        method = infer_method(keys)
    agents = info.get("agents")
    if not (isinstance(agents, list) and all(isinstance(a, str) for a in agents) and agents):
        agents = []
        non_agents = _non_agent_prefixes()
        for k in keys:
            head, sep, tail = k.partition("/")
            if sep and "/" not in tail and head not in non_agents and head not in agents \
                    and tail in ("accuracy", "loss"):
                agents.append(head)
    return method, agents


def _layout(method: str):
    """(draw, title) for ``method``: the registered method's, else the default's under ``method``."""
    try:
        m = get_method(method)
    except ConfigError:
        return get_method(_default_method()).dashboard, method
    return m.dashboard, getattr(m, "title", "") or method


def _rows_by_step(run_dir: Path) -> list[dict]:
    rows = read_metrics(run_dir)
    if not rows:
        raise ValueError(f"{run_dir / 'metrics.jsonl'}: no metrics")
    return sorted(rows, key=lambda r: (num(r.get("step")) is None, num(r.get("step")) or 0.0))


def plot_dashboard(run_dir: str | Path, out: Optional[Path] = None) -> Path:
    """Draw the six-panel dashboard of ``run_dir`` to ``out`` (default ``run_dir/dashboard.png``).

    Raises ``ValueError`` when the run has no metrics (the CLI checks first and reports it)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    run_dir = Path(run_dir)
    rows = _rows_by_step(run_dir)
    method, agents = run_info(run_dir, rows)
    draw, layout = _layout(method)
    out = Path(out) if out is not None else run_dir / "dashboard.png"

    fig = Figure(figsize=(16, 9), dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 3).ravel()
    draw(axes, rows, agents, run_dir)
    steps = [s for s in (num(r.get("step")) for r in rows) if s is not None]
    span = f"steps {int(min(steps))}–{int(max(steps))}" if steps else f"{len(rows)} rows"
    fig.suptitle(f"{run_dir.resolve().name} — {layout} ({span})", fontsize=15, fontweight="bold")
    fig.tight_layout(rect=(0, 0, 1, 0.965), h_pad=2.0, w_pad=1.5)

    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(out, "wb") as fh:
        _save_png(fig, fh)
    _make_ordinary(out)
    return out


def _make_ordinary(path: Path) -> None:
    """mkstemp made it private (0600); a dashboard is an ordinary file (the umask's mode)."""
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(path, 0o666 & ~umask)
    except OSError:
        pass


def plot_panels(run_dir: str | Path, out_dir: Optional[Path] = None) -> list[Path]:
    """Draw each of the dashboard's six panels as its own PNG in ``out_dir`` (default ``run_dir``),
    named ``panel_<i>_<title>.png`` after the panel's title (the seed notebook's six plots; the same
    layout as :func:`plot_dashboard`). Returns the six paths, in panel order."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    run_dir = Path(run_dir)
    rows = _rows_by_step(run_dir)
    method, agents = run_info(run_dir, rows)
    draw, _ = _layout(method)
    figs = [Figure(figsize=(7, 4.5), dpi=100) for _ in range(6)]
    for fig in figs:
        FigureCanvasAgg(fig)
    axes = [fig.subplots() for fig in figs]
    draw(axes, rows, agents, run_dir)
    out_dir = Path(out_dir) if out_dir is not None else run_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, (fig, ax) in enumerate(zip(figs, axes), 1):
        slug = re.sub(r"[^a-z0-9]+", "_", ax.get_title().lower()).strip("_") or "panel"
        fig.tight_layout()
        path = out_dir / f"panel_{i}_{slug}.png"
        with atomic_write(path, "wb") as fh:
            _save_png(fig, fh)
        _make_ordinary(path)
        paths.append(path)
    return paths


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


__all__ = ["infer_method", "plot_dashboard", "plot_panels", "run_info"]
