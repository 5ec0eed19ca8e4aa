"""The step-size study's tables for docs/sat_seq.md, regenerated from ``satseq compare``'s output.

    satseq compare recipes/compare/stability.yaml --out DIR --jobs 2
    python bench/figures/stability_tables.py DIR/comparison.json --write docs/sat_seq.md
    python bench/figures/stability_tables.py DIR/comparison.json --compact --write docs/results.md

Reads ``comparison.json`` (per cell: the held-out accuracy of every seed, its stability record,
the warm start's evaluation) and prints, per task, the grid (method × learning rate), then the
epochs axis and SAT-Seq's ablations. With ``--write`` it replaces the block between
``<!-- stability-tables:begin -->`` and ``<!-- stability-tables:end -->`` in that page (atomically), so
the page's figures are this output, never retyped.

Columns: the final held-out accuracy (the relay's vote; GRPO: its one pass), mean ± s.e. over seeds; best of the periodic held-out evaluation; the
seeds that collapsed, counted two ways — ``acc``: the final vote below the warm start's (the
collapse a user sees), ``any``: that, or a role's response length below 0.5× or its sampled entropy
below 0.1× stage 0's (docs/compare.md, "Stability"; on this task a converged policy's entropy often
falls below the floor, so ``any`` also counts runs that simply became confident); the largest q99 and
max per-token KL between consecutive policies (k3 estimate, clamped to 10 as in verl); SAT-Seq's mean
step scale α^j over its updates (1 = never shrunk).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

BEGIN, END = "<!-- stability-tables:begin -->", "<!-- stability-tables:end -->"
METHODS = [("sat_seq", "SAT-Seq"), ("sat_seq_no_check", "SAT-Seq, no KL check"),
           ("simultaneous", "simultaneous"), ("shared_policy", "one shared policy"), ("grpo", "GRPO (one pass)")]
ABLATIONS = [("sat_seq", "SAT-Seq (random order, IS, q0.99, shrink)"), ("sat_seq_no_is", "no IS factor (c = 1)"),
             ("sat_seq_fixed_order", "fixed order"), ("sat_seq_greedy_order", "greedy order"),
             ("sat_seq_mean_kl", "mean KL instead of q0.99"), ("sat_seq_beta_only", "β growth only, no shrink"),
             ("sat_seq_no_check", "no KL check"), ("simultaneous", "simultaneous update")]


def _ms(d) -> str:
    if not d:
        return "-"
    se = d.get("se")
    return f"{d['mean']:.3f} ± {se:.3f}" if se is not None and not math.isnan(se) else f"{d['mean']:.3f}"


def _num(d, digits: int = 2) -> str:
    if d is None:
        return "-"
    v = d["mean"] if isinstance(d, dict) else d
    return f"{v:.{digits}g}"


def _acc_collapsed(seeds: list[dict]) -> int:
    return sum(1 for s in seeds if (s.get("stability") or {}).get("collapse", {}).get("accuracy"))


def _row(label: str, lr: str, stab: dict | None, seeds: list[dict]) -> str:
    if stab is None:
        return f"| {label} | {lr} | not run | | | | | |"
    scale = _num(stab.get("step_scale_mean"), 2) if stab.get("step_scale_mean") else "-"
    return (f"| {label} | {lr} | {_ms(stab['final'])} | {_ms(stab.get('best'))} | "
            f"{_acc_collapsed(seeds)} / {stab['collapsed']} of {stab['seeds']} | {_num(stab.get('kl_step_q99'))} | "
            f"{_num(stab.get('kl_step_max'))} | {scale} |")


HEAD = ("| method | lr | final held-out | best (periodic) | collapsed: acc / any | KL q99 | KL max | step scale |\n"
        "|---|---|---|---|---|---|---|---|")


def _warm_rows(data: dict, cells: list[str]) -> list[str]:
    """The warm start's and its best-of-k rows, once per distinct warm start of ``cells`` (the relay's
    vote; GRPO's one-pass prompt is evaluated by its own workflow)."""
    rows, seen = [], set()
    k = data["spec"]["eval"]["k"]
    for cell in cells:
        w = (data.get("warm_start") or {}).get(cell)
        if not w:
            continue
        # the baseline's directory names its workflow (warm_start_<workflow>_<hash>); the same
        # evaluation of the same start may sit under several hashes (one per run's settings)
        how = "one pass" if "warm_start_single_" in str(w.get("dir")) else "relay vote"
        ev = w["eval"]
        if (how, ev["accuracy"]["mean"]) in seen:
            continue
        seen.add((how, ev["accuracy"]["mean"]))
        rows.append(f"| warm start ({how}) | - | {_ms(ev['accuracy'])} | | | | | |")
        if ev.get("pass@k"):
            rows.append(f"| best-of-{k} of the warm start ({how}) | - | {_ms(ev['pass@k'])} | | | | | |")
    return rows


def tables(data: dict) -> str:
    stab, sweep, runs_ = data["stability"], data.get("sweep", {}), data["runs"]

    def row(label: str, lr: str, cell: str | None) -> str:
        return _row(label, lr, stab.get(cell), runs_.get(cell, []))

    out = []
    for task in ("relay", "chain"):
        runs = [(f"{task}_{m}", label) for m, label in METHODS if f"{task}_{m}" in sweep]
        if not runs:
            continue
        out += [f"**{task}** — the grid (every method, the same learning rates; `sat_seq.lr` / `ppo.lr`)", "", HEAD]
        for run, label in runs:
            for cell in sweep[run]:
                out.append(row(label, cell.split("=", 1)[1], cell))
        out += _warm_rows(data, [c for run, _ in runs for c in sweep[run]]) + [""]
        epochs = [(f"{task}_{m}_4ep", label) for m, label in METHODS if f"{task}_{m}_4ep" in stab]
        if epochs:
            out += [f"**{task}** — 4 passes over each batch (`ppo_epochs=4`) at lr 1e-4, beside 1 pass", "", HEAD]
            for run, label in epochs:
                one = next((c for c in sweep.get(run[:-4], []) if c.endswith("=0.0001")), None)
                if one:
                    out.append(row(label, "1e-4, 1 pass", one))
                out.append(row(label, "1e-4, 4 passes", run))
            out += [""]
        abl = [(f"{task}_{m}", label) for m, label in ABLATIONS if f"{task}_{m}" in stab
               and m not in ("sat_seq", "sat_seq_no_check", "simultaneous")]
        if abl:
            out += [f"**{task}** — SAT-Seq's parts, one switched off at a time, at lr 1e-3", "", HEAD]
            for m, label in ABLATIONS:
                cell = f"{task}_{m}" if f"{task}_{m}" in stab else next(
                    (c for c in sweep.get(f"{task}_{m}", []) if c.endswith("=0.001")), None)
                if cell:
                    out.append(row(label, "1e-3", cell))
            out += _warm_rows(data, [c for c, _ in abl]) + [""]
    return "\n".join(out).rstrip() + "\n"


def compact(data: dict) -> str:
    """Per task, the final held-out accuracy (mean ± s.e. over seeds) of each method at each learning
    rate, and the rows outside the grid (epochs, ablations) with theirs: the study on one screen."""
    stab, sweep = data["stability"], data.get("sweep", {})
    out = []
    for task in ("relay", "chain"):
        runs = [(f"{task}_{m}", label) for m, label in METHODS if f"{task}_{m}" in sweep]
        if not runs:
            continue
        lrs = sorted({c.split("=", 1)[1] for run, _ in runs for c in sweep[run]}, key=float)  # a run may have more
        out += [f"| {task}: final held-out | " + " | ".join(f"lr {v}" for v in lrs) + " |",
                "|---|" + "---|" * len(lrs)]
        for run, label in runs:
            at = {c.split("=", 1)[1]: c for c in sweep[run]}
            out.append(f"| {label} | " + " | ".join(_ms((stab.get(at[v]) or {}).get("final")) if v in at else "not run"
                                                    for v in lrs) + " |")
        warm = [r.split(" | ")[0].lstrip("| ") + ": " + r.split(" | ")[2] for r in
                _warm_rows(data, [c for run, _ in runs for c in sweep[run]])]
        out += ["", f"{task}: " + "; ".join(warm) + ".", ""]
        extra = [(k, v) for k, v in stab.items() if k.startswith(f"{task}_") and "@" not in k]
        if extra:
            out += [f"{task}, outside the grid: " + "; ".join(f"`{k}` {_ms(v.get('final'))}" for k, v in extra) + ".", ""]
    return "\n".join(out).rstrip() + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("comparison", help="comparison.json written by satseq compare recipes/compare/stability.yaml")
    ap.add_argument("--write", help="a markdown page whose stability-tables block to replace")
    ap.add_argument("--compact", action="store_true", help="one table of final accuracies per task (docs/results.md)")
    a = ap.parse_args(argv)
    try:
        data = json.loads(Path(a.comparison).read_text())
    except (OSError, ValueError) as e:
        print(f"error: {a.comparison}: {e}", file=sys.stderr)
        return 2
    text = compact(data) if a.compact else tables(data)
    if not a.write:
        print(text, end="")
        return 0
    from satseq.errors import SatseqError
    from satseq.utils.io import replace_marked_block

    page = Path(a.write)
    try:
        replace_marked_block(page, BEGIN, END, text)
    except SatseqError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote the stability tables into {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
