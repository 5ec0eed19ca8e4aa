"""The PAG / A*-PO / GRPO dashboard layout (spec apo_pag.md, Metrics and the dashboard), drawn by
:func:`satseq.plots.plot_dashboard`: training loss; Acc@t1 vs Acc@final; verifier accuracy with correct /
wrong recall; answer change ratio with the collapse threshold; revision rate; V* histogram
(``vstar.json``). Runs without the PAG metrics degrade gracefully: the policy accuracy stands in for
Acc@t1 and a panel with nothing logged says so.
"""
from __future__ import annotations

from pathlib import Path

from satseq.plots import (COLLAPSE_THRESHOLD, NOT_LOGGED, _all_keys, _colors, _curve, _finish, _note, _num,
                          _read_json, _unit_range, collapse_warning, series)


def pag_panels(axes, rows, agents, run_dir: Path) -> None:
    colors = _colors(8)
    x_label = "training step"
    keys = set(_all_keys(rows))

    # (1) training loss
    ax = axes[0]
    loss_keys = [f"{a}/loss" for a in agents if f"{a}/loss" in keys] or \
        sorted(k for k in keys if k.endswith("/loss") and k.split("/")[0] not in ("eval", "time"))
    drawn = False
    for k, c in zip(loss_keys, colors):
        xs, ys = series(rows, k)
        if xs:
            _curve(ax, xs, ys, c, k.rsplit("/", 1)[0] if len(loss_keys) > 1 else "loss")
            drawn = True
    if drawn:
        ax.axhline(0.0, color="#999999", lw=0.8)
    else:
        _note(ax)
    _finish(ax, "Training loss", x_label, "loss (per token)")

    # (2) Acc@t1 vs Acc@final
    ax = axes[1]
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
        _curve(ax, *t1, colors[0], "Acc@t1" if t1_key == "pag/acc_t1" else f"Acc@t1 ({t1_key})")
        drawn = True
    fin = series(rows, "pag/acc_final")
    if fin[0]:
        _curve(ax, *fin, colors[1], "Acc@final")
        drawn = True
    for k, c, lbl in (("pag/acc_t1", colors[0], "Acc@t1"), ("pag/acc_final", colors[1], "Acc@final")):
        ex, ey = series(rows, f"eval/{k.split('/')[1]}")
        if ex:
            ax.plot(ex, ey, "s--", color=c, ms=5, lw=1.2, label=f"{lbl} (held-out)")
            drawn = True
    if not any(k.startswith("eval/acc_") for k in keys):
        for k in sorted(k for k in keys if k.startswith("eval/") and k.endswith("accuracy")):
            ex, ey = series(rows, k)
            if ex:
                ax.plot(ex, ey, "s--", color="#555555", ms=5, lw=1.2, label=f"held-out {k[5:]}")
                drawn = True
    if drawn:
        _unit_range(ax)
    else:
        _note(ax)
    _finish(ax, "Policy reward: Acc@t1 vs Acc@final", x_label, "accuracy (fraction correct)", min_entries=1)

    # (3) verifier accuracy + recalls
    ax = axes[2]
    drawn = False
    for k, c, lbl in (("pag/verifier_acc", colors[2], "verifier accuracy"),
                      ("pag/correct_recall", colors[0], "correct recall"),
                      ("pag/wrong_recall", colors[3], "wrong recall")):
        xs, ys = series(rows, k)
        if xs:
            _curve(ax, xs, ys, c, lbl)
            drawn = True
    if drawn:
        _unit_range(ax)
    else:
        _note(ax)
    _finish(ax, "Verifier accuracy and recalls", x_label, "rate (fraction)")

    # (4) answer change ratio + collapse threshold
    ax = axes[3]
    xs, ys = series(rows, "pag/answer_change_ratio")
    if xs:
        _curve(ax, xs, ys, colors[4], "answer change ratio")
        ax.axhline(COLLAPSE_THRESHOLD, color="#d62728", ls="--", lw=1.5,
                   label=f"collapse threshold ({COLLAPSE_THRESHOLD:g})")
        _unit_range(ax)
        if collapse_warning(rows) is not None:
            ax.text(0.02, 0.04, "⚠ below threshold: possible collapse", transform=ax.transAxes,
                    fontsize=9.5, color="#d62728", fontweight="bold")
    else:
        _note(ax)
    _finish(ax, "Answer change ratio (revised episodes)", x_label, "ratio (fraction)")

    # (5) revision rate
    ax = axes[4]
    xs, ys = series(rows, "pag/revision_rate")
    if xs:
        _curve(ax, xs, ys, colors[5], "revision rate")
        _unit_range(ax)
    else:
        _note(ax)
    _finish(ax, "Revision rate", x_label, "episodes revised (fraction)")

    # (6) V* histogram
    ax = axes[5]
    obj = _read_json(run_dir / "vstar.json")
    vals = obj.get("vstar") if isinstance(obj, dict) else None
    vals = [v for v in (_num(x) for x in vals)] if isinstance(vals, list) else []
    vals = [v for v in vals if v is not None]
    if vals:
        lo, hi = min(vals), max(vals)
        if 0.0 <= lo and hi <= 1.0:  # rewards in [0, 1]: a fixed axis reads the same across runs
            rng = (0.0, 1.0)
        elif hi > lo:
            rng = (lo, hi)
        else:
            rng = (lo - 0.5, lo + 0.5)
        ax.hist(vals, bins=20, range=rng, color=colors[0], alpha=0.8, edgecolor="white")
        mean = sum(vals) / len(vals)
        ax.axvline(mean, color="#d62728", ls="--", lw=1.5, label=f"mean = {mean:.3f} ({len(vals)} prompts)")
        ax.set_ylim(0, ax.get_ylim()[1] * 1.18)  # headroom for the legend
        _finish(ax, "V* distribution (per prompt)", "V* (expected reward)", "prompts (count)", min_entries=1)
    else:
        _note(ax, NOT_LOGGED + "\n(no vstar.json)")
        _finish(ax, "V* distribution (per prompt)", "V* (expected reward)", "prompts (count)")
