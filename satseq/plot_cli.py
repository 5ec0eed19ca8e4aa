"""``satseq plot RUN_DIR``: the six-panel training dashboard (see :mod:`satseq.plotting.dashboard`).

Matplotlib is imported only when the command runs, so registering it costs the CLI nothing.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from satseq.errors import SatseqError


def plot_command(run_dir: Path = typer.Argument(..., metavar="RUN_DIR", help="a run directory (holds metrics.jsonl)"),
                 out: Optional[Path] = typer.Option(None, "--out", help="PNG path (default RUN_DIR/dashboard.png)")):
    """Draw the run's six-panel metrics dashboard to a PNG; warn on a low answer change ratio."""
    from satseq.plotting.common import collapse_warning
    from satseq.plotting.dashboard import plot_dashboard
    from satseq.tracking import METRICS_FILE, read_metrics

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise SatseqError(f"{run_dir}: no such run directory")
    metrics = run_dir / METRICS_FILE
    if not metrics.is_file():
        raise SatseqError(f"{metrics}: no metrics file (is {run_dir} a run directory?)")
    rows = read_metrics(run_dir)
    if not rows:
        raise SatseqError(f"{metrics}: empty, nothing to plot (the run has logged no step yet)")
    path = plot_dashboard(run_dir, out)
    typer.echo(f"dashboard: {path}")
    warning = collapse_warning(rows)
    if warning:
        typer.echo(f"warning: {warning}")
    return path
