"""The PAG / A*-PO / GRPO dashboard layout (spec apo_pag.md, Metrics and the dashboard), drawn by
:func:`satseq.plotting.dashboard.plot_dashboard`:

1. training loss (per agent, else every logged ``<name>/loss``);
2. Acc@t1 vs Acc@final, plus held-out ``eval/acc_t1`` / ``eval/acc_final`` points (else any held-out
   ``eval/...accuracy``);
3. verifier accuracy with correct / wrong recall;
4. answer change ratio with the collapse threshold, and a warning when below it;
5. revision rate;
6. V* histogram (``vstar.json``).

Runs without the PAG metrics degrade gracefully: the policy accuracy stands in for Acc@t1 and a panel
with nothing logged says so.
"""
from __future__ import annotations

from pathlib import Path

from satseq.plotting.common import (COLLAPSE_THRESHOLD, NOT_LOGGED, X_LABEL, all_keys, collapse_warning, colors,
                                    curve, draw_panel, finish, held_out_points, note, num, read_json, series,
                                    unit_range)

COLLAPSE_NOTE = "⚠ below threshold: possible collapse"


def pag_panels(axes, rows, agents, run_dir: Path) -> None:
    """Draw the six PAG panels (see the module docstring) on ``axes`` (six matplotlib Axes)."""
    palette = colors(8)
    keys = set(all_keys(rows))

    # (1) training loss
    loss_keys = [f"{a}/loss" for a in agents if f"{a}/loss" in keys] or \
        sorted(k for k in keys if k.endswith("/loss") and k.split("/")[0] not in ("eval", "time"))
    draw_panel(axes[0], rows, [(k, c, k.rsplit("/", 1)[0] if len(loss_keys) > 1 else "loss")
                               for k, c in zip(loss_keys, palette)],
               title="Training loss", ylabel="loss (per token)", held_out=False, zero_line=True, min_entries=2)

    # (2) Acc@t1 vs Acc@final
    _accuracy_panel(axes[1], rows, agents, keys, palette)

    # (3) verifier accuracy + recalls
    draw_panel(axes[2], rows, [("pag/verifier_acc", palette[2], "verifier accuracy"),
                               ("pag/correct_recall", palette[0], "correct recall"),
                               ("pag/wrong_recall", palette[3], "wrong recall")],
               title="Verifier accuracy and recalls", ylabel="rate (fraction)", unit=True, held_out=False,
               min_entries=2)

    # (4) answer change ratio + collapse threshold
    draw_panel(axes[3], rows, [("pag/answer_change_ratio", palette[4], "answer change ratio")],
               title="Answer change ratio (revised episodes)", ylabel="ratio (fraction)", unit=True,
               held_out=False, thresholds=[(COLLAPSE_THRESHOLD, f"collapse threshold ({COLLAPSE_THRESHOLD:g})")],
               warning=COLLAPSE_NOTE if collapse_warning(rows) is not None else None, min_entries=2)

    # (5) revision rate
    draw_panel(axes[4], rows, [("pag/revision_rate", palette[5], "revision rate")], title="Revision rate",
               ylabel="episodes revised (fraction)", unit=True, held_out=False, min_entries=2)

    # (6) V* histogram
    _vstar_panel(axes[5], run_dir, palette[0])


def _accuracy_panel(ax, rows, agents, keys, palette) -> None:
    """Acc@t1 (else the first agent's or the policy's accuracy) and Acc@final, with held-out points."""
    drawn = False
    t1_key = "pag/acc_t1"
    t1 = series(rows, t1_key)
    if not t1[0]:
        for a in agents + ["policy"]:
            t1_key = f"{a}/accuracy"
            t1 = series(rows, t1_key)
            if t1[0]:
                break
    if t1[0]:
        curve(ax, *t1, palette[0], "Acc@t1" if t1_key == "pag/acc_t1" else f"Acc@t1 ({t1_key})")
        drawn = True
    fin = series(rows, "pag/acc_final")
    if fin[0]:
        curve(ax, *fin, palette[1], "Acc@final")
        drawn = True
    for k, c, lbl in (("pag/acc_t1", palette[0], "Acc@t1"), ("pag/acc_final", palette[1], "Acc@final")):
        ex, ey = series(rows, f"eval/{k.split('/')[1]}")
        if ex:
            held_out_points(ax, ex, ey, c, f"{lbl} (held-out)")
            drawn = True
    if not any(k.startswith("eval/acc_") for k in keys):
        for k in sorted(k for k in keys if k.startswith("eval/") and k.endswith("accuracy")):
            ex, ey = series(rows, k)
            if ex:
                held_out_points(ax, ex, ey, "#555555", f"held-out {k[5:]}")
                drawn = True
    if drawn:
        unit_range(ax)
    else:
        note(ax)
    finish(ax, "Policy reward: Acc@t1 vs Acc@final", X_LABEL, "accuracy (fraction correct)", min_entries=1)


def _vstar_panel(ax, run_dir: Path, color: str) -> None:
    """Histogram of the per-prompt V* of ``vstar.json`` with its mean."""
    obj = read_json(run_dir / "vstar.json")
    vals = obj.get("vstar") if isinstance(obj, dict) else None
    vals = [v for v in (num(x) for x in vals)] if isinstance(vals, list) else []
    vals = [v for v in vals if v is not None]
    if vals:
        lo, hi = min(vals), max(vals)
        if 0.0 <= lo and hi <= 1.0:  # rewards in [0, 1]: a fixed axis reads the same across runs
            rng = (0.0, 1.0)
        elif hi > lo:
            rng = (lo, hi)
        else:
            rng = (lo - 0.5, lo + 0.5)
        ax.hist(vals, bins=20, range=rng, color=color, alpha=0.8, edgecolor="white")
        mean = sum(vals) / len(vals)
        ax.axvline(mean, color="#d62728", ls="--", lw=1.5, label=f"mean = {mean:.3f} ({len(vals)} prompts)")
        ax.set_ylim(0, ax.get_ylim()[1] * 1.18)  # headroom for the legend
        finish(ax, "V* distribution (per prompt)", "V* (expected reward)", "prompts (count)", min_entries=1)
    else:
        note(ax, NOT_LOGGED + "\n(no vstar.json)")
        finish(ax, "V* distribution (per prompt)", "V* (expected reward)", "prompts (count)")
