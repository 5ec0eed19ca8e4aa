"""``comparison.md`` and ``comparison.json``: every run (mean ± s.e. over seeds) next to its baselines.

One row per compared run: held-out accuracy of the final answer (single policy: its answer; SAT-Seq
and the simultaneous update: the agents' vote; PAG: Acc@final; MLMT: the solver's turn 3) as
mean ± s.e. over seeds (``s.e. = sample std / sqrt(seeds)``), the mean of each run's own standard
error over problems ("eval s.e."), pass@k, the generated tokens and samples and the summed stage time
it spent, and its stages. Extra rows under it: PAG's verifier against the constant verifiers
(balanced accuracy in the accuracy column, wrong-recall and raw accuracy in the notes); MLMT's coach
alone and a solver that copies the coach; for one policy answering alone, the majority of k samples
(maj@k: the same policy given as many samples as a relay of k seats). Under the runs that share a
warm start: that warm start, evaluated the same way, its best-of-k (pass@k) and, answering alone,
its maj@k. Then, with a ``sweep``, per run the metric
against the swept value (mean ± s.e. over seeds; figure ``sweep.png``), and for every run the
stability table (:mod:`satseq.compare.stability`: collapsed seeds and why, final and best held-out
accuracy, the largest per-token KL between consecutive policies, SAT-Seq's backtracks and step
scale). Under the table, a warning when the runs' rollouts differ in engine, precision or decode kernel
(:func:`rollout_lines`). Every file is written atomically.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from satseq.utils.stats import mean_se
from satseq.compare.spec import value_label
from satseq.compare.stability import ENTROPY_FLOOR, LENGTH_FLOOR, over_seeds

HEADER = ["run", "accuracy (mean ± s.e. over seeds)", "eval s.e.", "pass@{k}", "generated tokens",
          "generated samples", "training time (s)", "stages", "notes"]


def fmt(v: Optional[dict] | Optional[float], digits: int = 3) -> str:
    """``0.512 ± 0.010`` from ``{"mean", "se"}`` (or a bare number); ``-`` when missing."""
    if v is None:
        return "-"
    if not isinstance(v, dict):
        return f"{v:.{digits}f}"
    if v.get("mean") is None:
        return "-"
    return f"{v['mean']:.{digits}f}" + (f" ± {v['se']:.{digits}f}" if v.get("se") is not None else "")


def _over_seeds(values: Sequence[Optional[float]]) -> Optional[dict]:
    vals = [v for v in values if v is not None]
    return mean_se(vals) if vals else None


def _mean(values: Sequence[Optional[float]]) -> Optional[float]:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def _row(label: str, acc=None, eval_se=None, passk=None, tokens="", samples="", time="", stages="", notes=""):
    return [label, fmt(acc), fmt(eval_se), fmt(passk), tokens, samples, time, stages, notes]


def run_rows(name: str, seeds: list[dict]) -> list[list[str]]:
    """The row of one compared run (over its seeds) and its own baseline rows (verifier, coach)."""
    ev = [s["eval"] for s in seeds]
    acc = [e["accuracy"]["mean"] for e in ev]
    notes = [f"seeds {', '.join(f'{a:.3f}' for a in acc)}"] if len(seeds) > 1 else []
    if not all(s["budget_reached"] for s in seeds):
        notes.append("budget not reached by some seed (max_stages)")
    if "turn1" in ev[0]:
        label = {"self_verify": "Acc@t1", "code_answer": "the coder's program printed the answer"}.get(
            ev[0]["workflow"], "turn 1")
        notes.append(f"{label} {fmt(_over_seeds([e['turn1']['mean'] for e in ev]))}")
    rows = [_row(f"**{name}** ({seeds[0]['method']})", _over_seeds(acc), _mean([e["accuracy"]["se"] for e in ev]),
                 _over_seeds([(e.get("pass@k") or {}).get("mean") for e in ev]),
                 f"{_mean([s['tokens'] for s in seeds]):,.0f}", f"{_mean([s['samples'] for s in seeds]):,.0f}",
                 fmt(_over_seeds([s["train_s"] for s in seeds]), 1), " / ".join(str(s["stages"]) for s in seeds),
                 "; ".join(notes))]
    if ev[0].get("maj@k") is not None:
        k = ev[0]["k"]
        rows.append(_row(f"↳ majority of {k} samples (maj@{k})", _over_seeds([e["maj@k"]["mean"] for e in ev]),
                         _mean([e["maj@k"]["se"] for e in ev]),
                         notes=f"the same policy given as many samples as a relay of {k} seats"))
    if "verifier" in ev[0]:
        for key, label in (("trained", "verifier, trained"), ("always_correct", 'verifier always "correct"'),
                           ("always_wrong", 'verifier always "wrong"')):
            st = [e["verifier"][key] for e in ev]
            rows.append(_row(f"↳ {label} (balanced accuracy)", _over_seeds([x["balanced_accuracy"] for x in st]),
                             notes=f"wrong-recall {fmt(_over_seeds([x['wrong_recall'] for x in st]))}; "
                                   f"correct-recall {fmt(_over_seeds([x['correct_recall'] for x in st]))}; "
                                   f"raw accuracy {fmt(_over_seeds([x['accuracy'] for x in st]))}; "
                                   f"{st[0]['n']} judged attempts ({st[0]['n_wrong']} wrong), seed {seeds[0]['seed']}"))
    if "coach" in ev[0]:
        for key, label in (("coach_alone", "coach alone (its turn-2 answer)"),
                           ("copy_coach", "copy the coach's answer (else turn 1)")):
            st = [e["coach"][key] for e in ev]
            rows.append(_row(f"↳ {label}", _over_seeds([x["mean"] for x in st]), _mean([x["se"] for x in st]),
                             notes="same episodes as the trained solver's turn 3"))
    return rows


def warm_rows(warm: dict, k: int, used_by: list[str]) -> list[list[str]]:
    """The warm start (same evaluation) and its best-of-k, for the runs ``used_by``."""
    e = warm["eval"]
    notes = [f"start of {', '.join(used_by)}; one evaluation (no seeds)"]
    if "verifier" in e:
        v = e["verifier"]["trained"]
        notes.append(f"its verifier: balanced accuracy {fmt(v['balanced_accuracy'])}, wrong-recall {fmt(v['wrong_recall'])}")
    if "coach" in e:
        notes.append(f"coach alone {fmt(e['coach']['coach_alone'])}, copy the coach {fmt(e['coach']['copy_coach'])}")
    rows = [_row("↳ warm start", e["accuracy"]["mean"], e["accuracy"]["se"], e.get("pass@k"), notes="; ".join(notes)),
            _row(f"↳ best-of-{k} of the warm start (pass@{k})", (e.get("pass@k") or {}).get("mean"),
                 (e.get("pass@k") or {}).get("se"), notes="the ceiling of what RL can select")]
    if e.get("maj@k") is not None:
        rows.append(_row(f"↳ majority of {k} samples of the warm start (maj@{k})", e["maj@k"]["mean"], e["maj@k"]["se"],
                         notes="what a vote adds without training"))
    return rows


def groups(results: dict[str, list[dict]], warm: dict[str, Optional[dict]]) -> list[tuple[Optional[str], list[str]]]:
    """Runs grouped by shared warm start (its directory, or None), in the order of the file."""
    out: list[tuple[Optional[str], list[str]]] = []
    for name in results:
        w = warm.get(name)
        key = w["dir"] if w else None
        for g in out:
            if key is not None and g[0] == key:
                g[1].append(name)
                break
        else:
            out.append((key, [name]))
    return out


def _rollout_of(result: dict) -> Optional[str]:
    """``engine/dtype/gemm`` of a run's rollouts, from its ``run_info.json`` (None when not recorded)."""
    from satseq.rollout.choice import recorded

    r = recorded(result["run_dir"]) if "run_dir" in result else None
    return None if r is None else "/".join(x for x in (r.engine, r.dtype, r.gemm) if x)


def rollout_lines(results: dict[str, list[dict]]) -> list[str]:
    """A warning under the table when the runs' rollouts differ in engine, precision or decode kernel:
    ``rollout.*=auto`` measures the CPU a run starts on, so a study resumed on another machine (bf16 2.4×
    float32 on one CPU, half its rate on another) can mix samplers in one table."""
    seen: dict[str, list[str]] = {}
    for name, seeds in results.items():
        for s in seeds:
            r = _rollout_of(s)
            if r is not None:
                seen.setdefault(r, []).append(f"{name} seed {s['seed']}")
    if len(seen) < 2:
        return []
    parts = "; ".join(f"`{r}`: {', '.join(v)}" for r, v in seen.items())
    return ["", f"**The runs' rollouts differ** (engine/precision/GEMM kernel, from each run's `run_info.json`: "
                f"{parts}): `rollout.*=auto` chose them on the machine each run started on. To compare like with "
                "like, set `rollout.engine`, `rollout.dtype` and `rollout.decode_gemm` under `common` and rerun the "
                "runs that differ."]


def markdown(spec, results: dict[str, list[dict]], warm: dict[str, Optional[dict]]) -> str:
    e = spec.eval
    k = e.k
    lines = [f"# Comparison: {spec.source}", "",
             f"Budget per run: {spec.budget.describe()}. Seeds: {', '.join(map(str, spec.seeds))}; "
             f"{spec.threads or 'all'} torch thread(s) per run. Held-out: `{e.dataset}`, {e.problems} problems × "
             f"{e.n} samples, T = {e.temperature:g}, top-p {e.top_p:g}, evaluation seed {e.seed}, the same for "
             "every run and baseline.", "",
             "Accuracy is the final answer's (one policy: its answer; relay: the agents' vote; PAG: Acc@final; "
             "MLMT: turn 3); eval s.e. is the mean over seeds of each run's standard error over problems. Tokens "
             "and samples: everything the run's rollouts generated (all turns); training time: summed stage time "
             "(rollout + update, no evaluation); both mean over seeds.", "",
             "| " + " | ".join(h.format(k=k) for h in HEADER) + " |", "|" + "---|" * len(HEADER)]
    for key, names in groups(results, warm):
        for name in names:
            lines += ["| " + " | ".join(r) + " |" for r in run_rows(name, results[name])]
        if key is not None:
            lines += ["| " + " | ".join(r) + " |" for r in warm_rows(warm[names[0]], k, names)]
        elif names:
            lines.append("| ↳ warm start | - | | | | | | | not built (LoRA run: its start is the base model) |")
    lines += rollout_lines(results)
    lines += ["", "## Per seed", "", f"| run | seed | accuracy ± eval s.e. | pass@{k} | generated tokens | "
              "training time (s) | stages | budget reached | run directory |", "|---|---|---|---|---|---|---|---|---|"]
    for name, seeds in results.items():
        for s in seeds:
            lines.append(f"| {name} | {s['seed']} | {fmt(s['eval']['accuracy'])} | {fmt(s['eval'].get('pass@k'))} | "
                         f"{s['tokens']:,} | {s['train_s']:.1f} | {s['stages']} | {'yes' if s['budget_reached'] else 'no'}"
                         f" | `{Path(s['run_dir']).name}` |")
    return "\n".join(lines) + "\n"


def sweeps(results: dict[str, list[dict]]) -> dict[str, list[str]]:
    """``{run: [its cells, in grid order]}`` for the runs that have a grid."""
    out: dict[str, list[str]] = {}
    for name, seeds in results.items():
        if seeds and seeds[0].get("point"):
            out.setdefault(seeds[0]["run"], []).append(name)
    return out


def _n(v: Optional[dict], digits: int = 1) -> str:
    return fmt(v, digits) if isinstance(v, dict) else "-"


def _g(v) -> str:
    """A KL or ratio: 3 significant digits; ``-`` when missing."""
    if isinstance(v, dict):
        if v.get("mean") is None:
            return "-"
        return f"{v['mean']:.3g}" + (f" ± {v['se']:.2g}" if v.get("se") is not None else "")
    return "-" if v is None else f"{v:.3g}"


def best_cells(comparison: dict) -> dict[str, tuple[str, float]]:
    """Per run with a grid (``comparison.json``'s ``sweep``): its cell with the highest final held-out
    accuracy (mean over seeds) and that accuracy; the first such cell on a tie."""
    best: dict[str, tuple[str, float]] = {}
    for run, cells in comparison.get("sweep", {}).items():
        for cell in cells:
            final = (comparison["stability"].get(cell) or {}).get("final") or {}
            if final.get("mean") is not None and (run not in best or final["mean"] > best[run][1]):
                best[run] = (cell, final["mean"])
    return best


def sweep_lines(results: dict[str, list[dict]], stab: dict[str, dict]) -> list[str]:
    """Per run with a grid: one row per grid point, the final and best held-out accuracy (mean ± s.e.
    over seeds), collapsed seeds and the largest consecutive-policy KL."""
    lines: list[str] = []
    for run, cells in sweeps(results).items():
        keys = list(results[cells[0]][0]["point"])
        method = results[cells[0]][0]["method"]
        lines += ["", f"### {run} ({method})", "",
                  "| " + " | ".join(f"`{k}`" for k in keys) + " | final accuracy | best (periodic eval) | "
                  "collapsed seeds | KL q99 (largest) | KL max (largest) |", "|" + "---|" * (len(keys) + 5)]
        for c in cells:
            st, point = stab[c], results[c][0]["point"]
            lines.append("| " + " | ".join(value_label(point[k]) for k in keys) + f" | {fmt(st['final'])} | {fmt(st['best'])} | {st['collapsed']} / {st['seeds']} | "
                         f"{_g(st['kl_step_q99'])} | {_g(st['kl_step_max'])} |")
    return lines


def _reasons(st: dict) -> str:
    """The collapse reasons, then the seeds whose entropy fell below the floor while held-out accuracy rose."""
    text = "; ".join(st["reasons"])
    if st.get("sharpened"):
        text += ("; " if text else "") + (f"not flagged: {st['sharpened']} / {st['seeds']} seeds sharpened "
                                          "(entropy below the floor, held-out accuracy above the warm start's)")
    return text


def stability_lines(stab: dict[str, dict]) -> list[str]:
    """The stability table: one row per run (cell), over its seeds."""
    lines = ["| run | collapsed seeds | final accuracy | best (periodic eval) | KL q99 (largest) | KL max (largest) | "
             "backtracks | shrunk / rejected updates | step scale mean (min) | length × (min) | entropy × (min) | "
             "collapse reasons |", "|" + "---|" * 12]
    for name, st in stab.items():
        shrunk = (f"{_n(st['shrunk'])} / {_n(st['rejected'])}" if st["shrunk"] is not None else "-")
        scale = (f"{_g(st['step_scale_mean'])} ({_g(st['step_scale_min'])})" if st["step_scale_mean"] else "-")
        lines.append(f"| {name} | {st['collapsed']} / {st['seeds']} | {fmt(st['final'])} | {fmt(st['best'])} | "
                     f"{_g(st['kl_step_q99'])} | {_g(st['kl_step_max'])} | {_n(st['backtracks'])} | {shrunk} | {scale} | "
                     f"{_g(st['length_ratio_min'])} | {_g(st['entropy_ratio_min'])} | {_reasons(st)} |")
    return lines


STABILITY_NOTE = (
    "Collapsed: the final held-out accuracy is below the warm start's (same evaluation), or for some role the "
    f"final response length is below {LENGTH_FLOOR:g} × stage 0's, or the final sampled per-token entropy below "
    f"{ENTROPY_FLOOR:g} × stage 0's while the held-out accuracy did not rise above the warm start's (an entropy that "
    "falls while the held-out accuracy rises is sharpening, not a collapse; final: the mean over the last 10 % of "
    "the stages). KL: the per-token k3 "
    "estimate of KL(π_old ‖ π_new) across one stage's update at the batch's own tokens, its 0.99 quantile and its "
    "max over the stage's response tokens, the largest over stages and agents (mean ± s.e. over seeds). Best: the maximum of the "
    "trainer's periodic held-out evaluation (one sample per problem; biased upwards as a maximum). Backtracks, "
    "shrunk / rejected updates (sums over the run, mean over seeds) and the step scale α^j (0 = rejected): "
    "SAT-Seq only. Definitions: docs/compare.md.")


def write_report(spec, out: Path, results: dict[str, list[dict]], warm: dict[str, Optional[dict]]) -> list[Path]:
    """``comparison.md``, ``comparison.json``, ``comparison.png`` and, with a sweep, ``sweep.png`` in
    ``out`` (each atomically)."""
    from satseq.compare.plot import plot_comparison, plot_sweep
    from satseq.utils.io import write_json, write_text

    out = Path(out)
    stab = {name: over_seeds([s["stability"] for s in seeds]) for name, seeds in results.items()
            if seeds and "stability" in seeds[0]}
    md = markdown(spec, results, warm)
    if sweeps(results):
        md += "\n## Sweep\n\nFinal held-out accuracy against the swept value, mean ± s.e. over seeds " \
              "(figure: `sweep.png`)." + "\n".join(sweep_lines(results, stab)) + "\n"
    if stab:
        md += "\n## Stability\n\n" + STABILITY_NOTE + "\n\n" + "\n".join(stability_lines(stab)) + "\n"
    write_text(out / "comparison.md", md)
    write_json(out / "comparison.json", {"spec": spec.model_dump(), "source": spec.source, "runs": results,
                                         "warm_start": warm, "stability": stab, "sweep": sweeps(results)})
    files = [out / "comparison.md", out / "comparison.json", out / "comparison.png"]
    plot_comparison(results, warm, out / "comparison.png", budget=spec.budget.describe())
    if sweeps(results):
        plot_sweep(results, warm, sweeps(results), out / "sweep.png")
        files.append(out / "sweep.png")
    return files
