"""Worker processes that end with the process that started them.

A ``ProcessPoolExecutor`` worker outlives its parent when the parent is killed (``kill PID``, an OOM kill,
a lost session): it finishes the training it was given, and a ``satseq compare`` restarted meanwhile
trains the same run directory beside it. :func:`end_with_parent` as the pool's ``initializer`` (with
``initargs=(os.getpid(),)``) makes each worker exit within ``every_s`` seconds of its parent's death.
The worker exits at once, mid-stage if it must: a run's checkpoint is written atomically at the end
of each stage, so the restarted study resumes it from there.
"""
from __future__ import annotations

import os
import threading
import time


def end_with_parent(parent_pid: int, every_s: float = 2.0) -> None:
    """Start a daemon thread that ends this process (exit status 1) once its parent is no longer
    ``parent_pid`` (the parent died and this process was re-parented)."""
    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(every_s)
        os._exit(1)

    threading.Thread(target=watch, name="satseq-end-with-parent", daemon=True).start()
