"""A tiny progress bar over :mod:`rich.progress`, silent off a terminal.

    with progress_bar(total=40, description="train") as bar:
        for stage in range(40):
            ...
            bar.set_postfix(f"reward {r:.2f}")
            bar.advance()

When ``enabled`` is False or stderr is not a terminal (CI logs, redirected output), nothing at all
is printed: no per-step lines and no final bar.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class ProgressHandle:
    """What :func:`progress_bar` yields: advance the bar, set a short status text after it."""

    def __init__(self, progress: Progress, task: TaskID, enabled: bool):
        self._progress = progress
        self._task = task
        self.enabled = enabled
        self.completed = 0

    def advance(self, n: int = 1, **fields: Any) -> None:
        """Move forward ``n`` steps; extra keyword ``fields`` are stored on the rich task."""
        self.completed += n
        self._progress.update(self._task, advance=n, **fields)

    def set_postfix(self, text: str) -> None:
        """Set the text shown after the bar (e.g. ``"reward 0.52 | kl 0.01"``)."""
        self._progress.update(self._task, postfix=str(text))


@contextlib.contextmanager
def progress_bar(total: Optional[int], description: str, enabled: bool = True) -> Iterator[ProgressHandle]:
    """A context manager yielding a :class:`ProgressHandle`; silent if disabled or not a TTY."""
    console = Console(stderr=True)
    show = bool(enabled) and console.is_terminal
    progress = Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("<"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[postfix]}"),
        console=console,
        disable=not show,
        transient=False,
    )
    with progress:
        task = progress.add_task(description, total=total, postfix="")
        yield ProgressHandle(progress, task, show)


__all__ = ["ProgressHandle", "progress_bar"]
