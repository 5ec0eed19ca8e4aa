"""An exclusive lock on a directory: ``fcntl.flock`` on the directory itself.

No lock file is left behind, and the lock goes when the descriptor closes: at the end of the ``with``
block, or when the process ends, however it ends (a killed worker never leaves a stale lock). Used where
two processes must not write one directory at once: one trainer per run directory
(:func:`satseq.checkpoint.sole_trainer`). :func:`satseq.models.warm_start.one_builder` takes the same
lock by hand: that module's code is fingerprinted into the shipped chain warm start
(:data:`satseq.models.shipped.BUILD_MODULES`), and an edit there means re-shipping it.
"""
from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def locked_dir(path: str | os.PathLike, wait: bool = True) -> Iterator[Path]:
    """Hold an exclusive lock on directory ``path`` (made if missing) for the ``with`` block. ``wait``:
    block until another holder lets go; otherwise raise :class:`BlockingIOError` at once. Locks on one
    directory taken twice in one process do not nest (a second descriptor blocks on the first)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield path
    finally:
        os.close(fd)  # closing the descriptor releases the lock
