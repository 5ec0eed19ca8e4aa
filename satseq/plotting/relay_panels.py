"""The SAT-Seq dashboard layout (spec sat_seq.md, Metrics), drawn by
:func:`satseq.plotting.dashboard.plot_dashboard` for runs of method ``sat_seq``; x axis: the stage.

1. the training loss per agent (surrogate loss per token);
2. training accuracy per agent and the majority vote, plus held-out ``eval/<agent>/accuracy`` and
   ``eval/vote_accuracy`` points;
3. the KL quantile per agent against the target KL (``algorithm.kl_ctrl.target_kl`` of the run's
   ``train_config.yaml``, default 0.05);
4. the KL coefficient β per agent (log scale);
5. backtracks per agent as bars (the step was shrunk to 0.5^backtracks of the proposal; the step
   scale is on the right axis), rejected updates marked ×;
6. the certificate: the PAC lower bound on the vote accuracy (``certificate/vote_lower``) beside its
   batch's estimate and the held-out vote accuracy, and the certified improvement over the warm start
   (``certificate/vote_improvement_lower``).

Every panel says so when its metrics were not logged.
"""
from __future__ import annotations

from pathlib import Path

from satseq.plotting.common import colors, curve, finish, held_out_points, note, num, series, unit_range

DEFAULT_TARGET_KL = 0.05


def target_kl(run_dir: Path) -> float:
    """``algorithm.kl_ctrl.target_kl`` of the run's ``train_config.yaml`` (default 0.05)."""
    path = run_dir / "train_config.yaml"
    try:
        import yaml

        cfg = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        value = num(cfg["algorithm"]["kl_ctrl"]["target_kl"])
    except Exception:  # absent, unreadable or without the key: the default
        return DEFAULT_TARGET_KL
    return value if value is not None else DEFAULT_TARGET_KL


def sat_seq_panels(axes, rows, agents, run_dir: Path) -> None:
    """Draw the six SAT-Seq panels (see the module docstring) on ``axes`` (six matplotlib Axes)."""
    palette = colors(max(len(agents), 1) + 2)
    x_label = "stage"

    # (1) loss per agent
    ax = axes[0]
    drawn = False
    for agent, c in zip(agents, palette):
        xs, ys = series(rows, f"{agent}/loss")
        if xs:
            curve(ax, xs, ys, c, agent)
            drawn = True
    if drawn:
        ax.axhline(0.0, color="#999999", lw=0.8)
    else:
        note(ax)
    finish(ax, "Training loss", x_label, "surrogate loss (per token)")

    # (2) training accuracy per agent + vote (+ held-out)
    ax = axes[1]
    drawn = False
    for agent, c in zip(agents, palette):
        xs, ys = series(rows, f"{agent}/accuracy")
        if xs:
            curve(ax, xs, ys, c, agent)
            drawn = True
        ex, ey = series(rows, f"eval/{agent}/accuracy")
        if ex:
            held_out_points(ax, ex, ey, c, f"{agent} (held-out)")
            drawn = True
    xs, ys = series(rows, "rollout/vote_accuracy")
    if xs:
        curve(ax, xs, ys, "black", "majority vote")
        drawn = True
    ex, ey = series(rows, "eval/vote_accuracy")
    if ex:
        held_out_points(ax, ex, ey, "black", "vote (held-out)", marker="D")
        drawn = True
    if drawn:
        unit_range(ax)
    else:
        note(ax)
    finish(ax, "Accuracy (train rollouts)", x_label, "accuracy (fraction correct)")

    # (3) KL quantile per agent vs target
    ax = axes[2]
    target = target_kl(run_dir)
    drawn = False
    positive = True
    for agent, c in zip(agents, palette):
        xs, ys = series(rows, f"{agent}/kl_quantile")
        if xs:
            curve(ax, xs, ys, c, agent)
            positive = positive and min(ys) > 0
            drawn = True
    if drawn:
        ax.axhline(target, color="#d62728", ls="--", lw=1.5, label=f"target KL = {target:g}")
        if positive:
            ax.set_yscale("log")
    else:
        note(ax)
    finish(ax, "KL quantile per update", x_label, "KL quantile (nats / token)")

    # (4) beta per agent (log)
    ax = axes[3]
    drawn = False
    all_pos = True
    for i, (agent, c) in enumerate(zip(agents, palette)):
        xs, ys = series(rows, f"{agent}/beta")
        if xs:
            # identical β curves overlap exactly: distinct dash styles keep each agent visible
            ax.plot(xs, ys, color=c, lw=2.0, label=agent, ls=["-", "--", ":", "-."][i % 4])
            all_pos = all_pos and min(ys) > 0
            drawn = True
    if drawn:
        ax.set_yscale("log" if all_pos else "symlog")
    else:
        note(ax)
    finish(ax, "KL coefficient β", x_label, "β (log scale)")

    # (5) backtracks per agent, rejections marked
    ax = axes[4]
    drawn = False
    n_rej_total = 0
    bt_max = 0.0
    width = 0.8 / max(len(agents), 1)
    for i, (agent, c) in enumerate(zip(agents, palette)):
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
            msg = " · ".join(t for t, cond in (("no backtracks", not any_bt),
                                                 ("no rejected updates", n_rej_total == 0)) if cond)
            ax.text(0.5, 0.5 if not any_bt else 0.93, msg, transform=ax.transAxes, ha="center", va="center",
                    fontsize=11, color="#555555", style="italic")
        ax.yaxis.get_major_locator().set_params(integer=True)
        scales = [(agent, c, series(rows, f"{agent}/step_scale")) for agent, c in zip(agents, palette)]
        if any(xs for _, _, (xs, _) in scales):
            right = ax.twinx()
            for agent, c, (xs, ys) in scales:
                if xs:
                    right.plot(xs, ys, ".", color=c, ms=4, alpha=0.8)
            right.set_ylim(0, 1.4)
            right.set_ylabel("step scale α^j (dots; 0 = rejected)", fontsize=9)
    else:
        note(ax)
    finish(ax, "Backtracks and rejected updates (×)", x_label, "backtracks (count)")

    # (6) certificate
    ax = axes[5]
    drawn = False
    for key, color, label, marker in (("certificate/vote_lower", "black", "vote: PAC lower bound", "o"),
                                      ("certificate/vote_mean", "#1f77b4", "vote: certificate batch", "s"),
                                      ("eval/vote_accuracy", "#7f7f7f", "vote: held-out eval", "^"),
                                      ("certificate/vote_improvement_lower", "#d62728",
                                       "certified improvement over the warm start", "D")):
        xs, ys = series(rows, key)
        if xs:
            ax.plot(xs, ys, marker=marker, ls="--" if key.startswith("eval/") else "-", color=color, lw=1.2, ms=6,
                    label=label)
            drawn = True
    if drawn:
        ax.axhline(0.0, color="#999999", lw=0.8)
    else:
        note(ax)
    finish(ax, "Certificate (probability ≥ 1 − δ)", x_label, "vote accuracy", ncol=1)
