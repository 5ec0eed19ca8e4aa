"""The MLMT-RL dashboard layout (spec mlmt.md, Metrics), drawn by :func:`satseq.plots.plot_dashboard`
for runs whose ``run_info.json`` says ``method: mlmt``:

1. training loss per role (solver, coach);
2. accuracy after turn 1 and after turn 3, training batches and held-out ``eval/mlmt/*`` points;
3. the coach: its own answer's accuracy and how often the solver's final answer is the coach's;
4. the coach reward and its parts (r(ŷ) is the reward minus the weighted parts; conf, dep clipped);
5. KL to the reference policy per role (k3 estimate);
6. improvement (wrong → right) and degradation (right → wrong) rates.

Every panel says so when its metrics were not logged (e.g. a role that never trains).
"""
from __future__ import annotations

from pathlib import Path

from satseq.plots import _colors, _curve, _finish, _note, _unit_range, series

ROLES = ("solver", "coach")


def _draw(ax, rows, curves, *, title: str, ylabel: str, unit: bool = False, held_out: bool = True,
          zero_line: bool = False) -> None:
    """``curves``: (metric key, colour, label); held-out ``eval/<key>`` points are added when logged."""
    drawn = False
    for key, color, label in curves:
        xs, ys = series(rows, key)
        if xs:
            _curve(ax, xs, ys, color, label)
            drawn = True
        ex, ey = series(rows, f"eval/{key}") if held_out else ([], [])
        if ex:
            ax.plot(ex, ey, "s--", color=color, ms=5, lw=1.2, label=f"{label} (held-out)")
            drawn = True
    if not drawn:
        _note(ax)
    else:
        if unit:
            _unit_range(ax)
        if zero_line:
            ax.axhline(0.0, color="#999999", lw=0.8)
    _finish(ax, title, "training step", ylabel, min_entries=1)


def mlmt_panels(axes, rows, agents, run_dir: Path) -> None:
    c = _colors(6)
    _draw(axes[0], rows, [(f"{r}/loss", c[i], r) for i, r in enumerate(ROLES)], title="Training loss",
          ylabel="loss (per token)", held_out=False, zero_line=True)
    _draw(axes[1], rows, [("mlmt/acc_t1", c[0], "turn 1"), ("mlmt/acc_t3", c[1], "turn 3")],
          title="Accuracy after turn 1 and turn 3", ylabel="accuracy (fraction correct)", unit=True)
    _draw(axes[2], rows, [("mlmt/coach_accuracy", c[2], "coach's own answer"),
                          ("mlmt/follows_coach", c[4], "final answer = coach's")],
          title="The coach: accuracy and being followed", ylabel="fraction", unit=True)
    _draw(axes[3], rows, [("coach/reward", c[1], "coach reward"), ("coach/conf", c[0], "conf(ŷ)"),
                          ("coach/dep_clipped", c[2], "dep(g), clipped")],
          title="Coach reward and its parts", ylabel="value", held_out=False, zero_line=True)
    _draw(axes[4], rows, [(f"{r}/kl_ref", c[i], r) for i, r in enumerate(ROLES)], title="KL to the reference",
          ylabel="KL (k3, per token)", held_out=False)
    _draw(axes[5], rows, [("mlmt/improvement_rate", c[2], "improvement (wrong → right)"),
                          ("mlmt/degradation_rate", c[3], "degradation (right → wrong)")],
          title="Turn 3 vs turn 1: changes", ylabel="rate", unit=True)
