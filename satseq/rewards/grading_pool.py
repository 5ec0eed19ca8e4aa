"""Persistent worker processes for the math-verify step, with a hard kill on expiry.

Why a process: math-verify (sympy) can run for minutes on a 15-character answer
(``(9999!)^{99999}``, ``(x+1)^{9999}``), and a Python thread cannot be interrupted from outside; a
signal deadline works only in the main thread. A child process can always be killed.

Design:

- a worker is ``python -m satseq.rewards.mv_engine`` started with :mod:`subprocess` (fork+exec:
  no torch or CUDA state is inherited, and, unlike ``multiprocessing``'s spawn and forkserver, the
  caller's ``__main__`` script is never re-imported in the worker). It imports math-verify once
  (~0.5 s) and then answers length-prefixed pickled requests on stdin with one byte on stdout;
- workers are started lazily, at most :data:`MAX_WORKERS`; a call takes an idle one (or starts
  one), writes the pair and waits with ``select`` for the remaining time. The deadline covers the
  wait for a free worker too, so a call never takes longer than ``timeout`` plus the kill;
- on expiry the worker is killed (``SIGKILL`` to its process group) and a replacement is started
  at once in the background, so the next call rarely waits for its import;
- the process, its deadline and its kill are :class:`satseq.utils.killable.KillableProcess` and
  :func:`~satseq.utils.killable.wait_readable`, the mechanism the Python sandbox
  (:mod:`satseq.tools.sandbox`) uses too (here with no resource limits: a limit could change a
  grade);
- ``atexit`` stops the workers; a worker exits by itself when its parent is gone; a forked child
  of the caller (``os.getpid()`` changed) starts its own workers instead of sharing the pipes.

:func:`run` returns ``(status, value)`` with status ``"ok"``, ``"timeout"`` (the worker ran past
the deadline and was killed), ``"busy"`` (no worker came free before the deadline) or ``"error"``
(the worker died). It never raises. POSIX only (``select`` on pipes).
"""
from __future__ import annotations

import atexit
import os
import pickle
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from satseq.utils.killable import KillableProcess, wait_readable

__all__ = ["MAX_WORKERS", "run", "warm", "shutdown", "stats"]

#: Most worker processes alive at once (each is one process with sympy loaded, ~80 MB).
MAX_WORKERS = 2
_ENGINE = "satseq.rewards.mv_engine"
_PKG_ROOT = str(Path(__file__).resolve().parents[2])  # so the worker imports this same satseq


class _Worker:
    def __init__(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([_PKG_ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = "1"
        self.child = KillableProcess([sys.executable, "-m", _ENGINE], env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.proc = self.child.proc
        self.out_fd = self.proc.stdout.fileno()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def ask(self, args: tuple, deadline: float) -> str | None:
        """Send ``args``; the reply byte, or None on expiry. Raises OSError if the worker died."""
        body = pickle.dumps(args, protocol=pickle.HIGHEST_PROTOCOL)
        self.proc.stdin.write(struct.pack("<I", len(body)) + body)
        self.proc.stdin.flush()
        if not wait_readable([self.out_fd], deadline):
            return None
        byte = os.read(self.out_fd, 1)
        if not byte:
            raise OSError("grading worker exited")
        return byte.decode()

    def kill(self) -> None:
        self.child.kill()

    def stop(self) -> None:
        try:
            self.proc.stdin.close()  # EOF: the worker exits by itself
            self.proc.wait(timeout=0.5)
        except Exception:  # noqa: BLE001
            pass
        if self.alive():
            self.kill()
        self.child.close()


class _Pool:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.cv = threading.Condition()
        self.idle: list[_Worker] = []
        self.busy: set[_Worker] = set()
        self.starting = 0
        self.started = 0
        self.killed = 0
        self.closed = False

    def acquire(self, deadline: float) -> _Worker | None:
        with self.cv:
            while True:
                if self.idle:
                    w = self.idle.pop()
                    if w.alive():
                        self.busy.add(w)
                        return w
                    w.kill()
                    continue
                if len(self.busy) + self.starting < MAX_WORKERS:
                    self.starting += 1
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self.cv.wait(remaining):
                    if not self.idle:
                        return None
        return self._start(busy=True)  # outside the lock: other callers keep using the idle workers meanwhile

    def release(self, w: _Worker, alive: bool) -> None:
        with self.cv:
            self.busy.discard(w)
            if alive:
                self.idle.append(w)
            else:
                self.killed += 1
            self.cv.notify()
        if not alive:
            w.kill()
            self._replace()

    def _replace(self) -> None:
        """Start a worker in place of a killed one now, so it imports sympy while nobody waits."""
        with self.cv:
            if self.closed or len(self.idle) + len(self.busy) + self.starting >= MAX_WORKERS:
                return
            self.starting += 1
        self._start(busy=False)

    def _start(self, *, busy: bool) -> _Worker | None:
        """Start a worker (the caller has counted it in ``starting``) and file it as busy or idle."""
        try:
            w = _Worker()
        except Exception:  # noqa: BLE001
            w = None
        with self.cv:
            self.starting -= 1
            if w is not None:
                (self.busy.add if busy else self.idle.append)(w)
                self.started += 1
            self.cv.notify()
        return w

    def shutdown(self) -> None:
        with self.cv:
            self.closed = True
            workers = self.idle + list(self.busy)
            self.idle, self.busy = [], set()
        for w in workers:
            w.stop()


_lock = threading.Lock()
_pool: _Pool | None = None


def _get_pool() -> _Pool:
    global _pool
    pool = _pool
    if pool is None or pool.pid != os.getpid():
        with _lock:
            if _pool is None or _pool.pid != os.getpid():
                _pool = _Pool()  # (in a forked child the parent's workers are not ours to use)
            pool = _pool
    return pool


def run(args: tuple, timeout: float) -> tuple[str, Any]:
    """``mv_engine.compare(*args)`` in a worker process, killed after ``timeout`` seconds."""
    deadline = time.monotonic() + max(float(timeout), 0.0)
    pool = _get_pool()
    w = pool.acquire(deadline)
    if w is None:
        return "busy", None
    try:
        reply = w.ask(args, deadline)
    except Exception:  # noqa: BLE001 — a dead worker (EOF, broken pipe): drop it
        pool.release(w, alive=False)
        return "error", None
    if reply is None:
        pool.release(w, alive=False)  # expired: kill it (a replacement starts at once)
        return "timeout", None
    pool.release(w, alive=True)
    return "ok", reply == "1"


def warm(timeout: float = 60.0) -> bool:
    """Start a worker now (its sympy import included) and grade one pair; True on success."""
    status, _ = run(("1", "1", (), ()), timeout)
    return status == "ok"


def stats() -> dict:
    """Workers ``started``, ``killed`` (on expiry or death), ``alive`` now."""
    pool = _get_pool()
    with pool.cv:
        return {"started": pool.started, "killed": pool.killed, "alive": len(pool.idle) + len(pool.busy)}


def shutdown() -> None:
    """Stop all workers (also run at interpreter exit)."""
    if _pool is not None and _pool.pid == os.getpid():
        _pool.shutdown()


atexit.register(shutdown)
