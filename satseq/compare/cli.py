"""``satseq compare FILE [--out DIR]``: several methods × seeds at one budget, with their trivial baselines.

:func:`run_comparison` reads and validates the file (:mod:`satseq.compare.spec`; every cell's config
is loaded before anything runs; a run without a ``sweep`` is one cell), then for each cell and seed
(one at a time, or ``--jobs N`` side by side in worker processes, each with the file's ``threads``),
trains it to the budget and evaluates it (:mod:`satseq.compare.runner`; resumable: a finished (run, seed) is read back, a
killed one resumes from its checkpoint), evaluates the warm starts the same way
(:mod:`satseq.compare.baselines`), computes each run's stability statistics
(:mod:`satseq.compare.stability`), and writes ``comparison.md``, ``comparison.json``,
``comparison.png`` and, with a sweep, ``sweep.png`` (:mod:`satseq.compare.report`,
:mod:`satseq.compare.plot`). Registered in
:mod:`satseq.cli`, which turns a :class:`~satseq.errors.SatseqError` into one ``error:`` line.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Optional

import typer

from satseq.errors import ConfigError


def run_comparison(path: str | Path, out: Optional[str | Path] = None, *, console: Callable = print,
                   progress: bool = True, jobs: int = 1, only: Optional[list[str]] = None) -> list[Path]:
    """Run (or finish) the comparison in ``path``; returns the files written. ``jobs`` > 1 trains that
    many (cell, seed) pairs at once, each in its own process (a cell's result does not depend on it:
    every run's threads are the file's; only a seconds budget would, so it is refused there). ``only``:
    run names or cell names to run and report (the others are neither run nor reported; a cell's
    results do not depend on which others run, so the whole file later reuses them)."""
    from satseq.compare.baselines import summarize_eval, warm_start_run
    from satseq.compare.report import write_report
    from satseq.compare.runner import evaluate, train_and_evaluate
    from satseq.compare.spec import check_runs, read_spec
    from satseq.compare.stability import run_stability
    from satseq.tracking import read_metrics
    from satseq.utils.progress import progress_bar

    spec, lines = read_spec(path)
    if out is None and spec.output_dir is None:
        raise ConfigError(f"{spec.source}: no output directory: set output_dir in the file or pass --out")
    out_dir = Path(out if out is not None else spec.output_dir).expanduser().resolve()
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"--out {out_dir} is a file")
    if jobs < 1:
        raise ConfigError(f"--jobs must be at least 1, got {jobs}")
    if jobs > 1 and spec.budget.kind == "seconds":
        raise ConfigError(f"{spec.source}: a seconds budget measures each run's wall-clock; with --jobs {jobs} the "
                          "runs would share the cores and spend it differently: use --jobs 1 or a tokens budget")
    cells = select_cells(check_runs(spec, lines, out_dir), only, spec.source)
    out_dir.mkdir(parents=True, exist_ok=True)
    n_runs = len({c.base for c in cells})
    grid = f" ({len(cells)} cells)" if len(cells) != n_runs else ""
    part = f" of {len(spec.runs)} (--runs)" if only else ""
    side = f", {jobs} at a time" if jobs > 1 else ""
    console(f"[compare] {n_runs} runs{part}{grid} × {len(spec.seeds)} seeds, {spec.budget.describe()} each{side} "
            f"-> {out_dir}")
    results: dict[str, list[dict]] = {c.name: [] for c in cells}
    warm: dict[str, Optional[dict]] = {}
    warm_evals: dict[str, dict] = {}
    pairs = [(cell, seed) for cell in cells for seed in spec.seeds]
    with progress_bar(len(pairs), "compare", enabled=progress) as bar:
        if jobs > 1:
            trained = _train_side_by_side(spec, pairs, out_dir, jobs, bar)
        for i, (run, seed) in enumerate(pairs):
            if jobs > 1:
                res = trained[i]
            else:
                bar.set_postfix(f"{run.name} seed {seed}")

                def on_stage(stage: int, used: float, run=run, seed=seed) -> None:
                    bar.set_postfix(f"{run.name} seed {seed}: stage {stage + 1}, "
                                    f"{min(used / spec.budget.amount, 1):.0%} of the budget")

                res = train_and_evaluate(spec, run, seed, out_dir, console=console, on_stage=on_stage)
                bar.advance()
            results[run.name].append(res)
            if run.name not in warm:
                bar.set_postfix(f"warm start of {run.name}")
                d = warm_start_run(Path(res["run_dir"]), out_dir)
                if d is not None and str(d) not in warm_evals:
                    metrics, preds = evaluate(spec, d, out_dir / "evals" / d.name, stage=0)
                    warm_evals[str(d)] = summarize_eval(metrics, preds, spec.eval.k)
                warm[run.name] = {"dir": str(d), "eval": warm_evals[str(d)]} if d is not None else None
    for name, seeds in results.items():  # from metrics.jsonl each time: cheap, and follows this code's reading
        warm_acc = warm[name]["eval"]["accuracy"]["mean"] if warm.get(name) else None
        for res in seeds:
            res["stability"] = run_stability(read_metrics(Path(res["run_dir"])), res["eval"]["accuracy"]["mean"],
                                             warm_acc, res["curve"]["acc"])
    files = write_report(spec, out_dir, results, warm)
    console(f"[compare] wrote {', '.join(str(f) for f in files)}")
    return files


def select_cells(cells: list, only: Optional[list[str]], source) -> list:
    """The cells named in ``only`` (a run's name selects all its cells), in file order; every name must
    be a run or a cell of the file."""
    if not only:
        return cells
    known = list(dict.fromkeys([c.base for c in cells] + [c.name for c in cells]))
    unknown = [n for n in only if n not in known]
    if unknown:
        raise ConfigError(f"--runs {','.join(unknown)}: not a run or cell of {source} "
                          f"(it has: {', '.join(known)})")
    return [c for c in cells if c.name in only or c.base in only]


def _train_one(spec, run, seed: int, out_dir: Path) -> dict:
    """A worker process's job: one (cell, seed), trained and evaluated (its lines prefixed by the cell)."""
    from satseq.compare.runner import train_and_evaluate

    tag = f"[{run.name} seed {seed}]"
    return train_and_evaluate(spec, run, seed, out_dir, console=lambda *a: print(tag, *a, flush=True))


def _train_side_by_side(spec, pairs: list, out_dir: Path, workers: int, bar) -> list[dict]:
    """Every (cell, seed) of ``pairs`` in ``workers`` processes (spawned: no forked torch threads; each
    ends with this process, :mod:`satseq.utils.children`); the results in ``pairs``' order. The first
    failure cancels the pairs not started and is raised once the running ones end (each is resumable,
    as in one process)."""
    import multiprocessing
    from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait

    from satseq.utils.children import end_with_parent

    results: list = [None] * len(pairs)
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                             initializer=end_with_parent, initargs=(os.getpid(),)) as pool:
        futures = {pool.submit(_train_one, spec, run, seed, out_dir): i for i, (run, seed) in enumerate(pairs)}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_EXCEPTION)
            for f in done:
                if f.exception() is not None:
                    for p in pending:
                        p.cancel()
                    wait(pending)
                    raise f.exception()
                results[futures[f]] = f.result()
                run, seed = pairs[futures[f]]
                bar.set_postfix(f"{run.name} seed {seed} done")
                bar.advance()
    return results


def compare_command(
    file: Path = typer.Argument(..., help="the comparison YAML (runs × seeds, budget; see docs/compare.md)"),
    out: Optional[Path] = typer.Option(None, "--out", help="output directory (default: output_dir in the file)"),
    progress: bool = typer.Option(True, "--progress/--no_progress", help="progress bar (only on a terminal)"),
    jobs: int = typer.Option(1, "--jobs", help="train this many (run, seed) pairs at once, each in its own process "
                                              "with the file's threads (token or sample budgets only)"),
    runs: Optional[str] = typer.Option(None, "--runs", help="comma-separated run (or cell) names: run and report "
                                                           "only these (the whole file later reuses them)"),
):
    """Compare methods × seeds at one budget (generated tokens or samples, or seconds) next to their trivial
    baselines, optionally over a sweep grid; resumable; writes comparison.md / .json / .png (and sweep.png)."""
    only = [n.strip() for n in runs.split(",") if n.strip()] if runs is not None else None
    if runs is not None and not only:
        raise ConfigError("--runs: no run names given")
    run_comparison(file, out, console=typer.echo, progress=progress, jobs=jobs, only=only)
