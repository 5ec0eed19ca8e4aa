"""The MLMT-RL dashboard layout (spec mlmt.md, Metrics), drawn by
:func:`satseq.plotting.dashboard.plot_dashboard` for runs of method ``mlmt``:

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

from satseq.plotting.common import colors, draw_panel

ROLES = ("solver", "coach")


def mlmt_panels(axes, rows, agents, run_dir: Path) -> None:
    """Draw the six MLMT-RL panels (see the module docstring) on ``axes`` (six matplotlib Axes)."""
    c = colors(6)
    draw_panel(axes[0], rows, [(f"{r}/loss", c[i], r) for i, r in enumerate(ROLES)], title="Training loss",
               ylabel="loss (per token)", held_out=False, zero_line=True)
    draw_panel(axes[1], rows, [("mlmt/acc_t1", c[0], "turn 1"), ("mlmt/acc_t3", c[1], "turn 3")],
               title="Accuracy after turn 1 and turn 3", ylabel="accuracy (fraction correct)", unit=True)
    draw_panel(axes[2], rows, [("mlmt/coach_accuracy", c[2], "coach's own answer"),
                               ("mlmt/follows_coach", c[4], "final answer = coach's")],
               title="The coach: accuracy and being followed", ylabel="fraction", unit=True)
    draw_panel(axes[3], rows, [("coach/reward", c[1], "coach reward"), ("coach/conf", c[0], "conf(ŷ)"),
                               ("coach/dep_clipped", c[2], "dep(g), clipped")],
               title="Coach reward and its parts", ylabel="value", held_out=False, zero_line=True)
    draw_panel(axes[4], rows, [(f"{r}/kl_ref", c[i], r) for i, r in enumerate(ROLES)],
               title="KL to the reference", ylabel="KL (k3, per token)", held_out=False)
    draw_panel(axes[5], rows, [("mlmt/improvement_rate", c[2], "improvement (wrong → right)"),
                               ("mlmt/degradation_rate", c[3], "degradation (right → wrong)")],
               title="Turn 3 vs turn 1: changes", ylabel="rate", unit=True)
