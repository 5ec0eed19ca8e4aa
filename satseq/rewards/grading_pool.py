"""A persistent worker process for the math-verify step, with a hard kill on expiry.

Why a process: math-verify (sympy) can run for minutes on a 15-character answer
(``(9999!)^{99999}``), and a Python thread cannot be interrupted from outside; a signal deadline
works only in the main thread. A child process can always be killed.

Design:

- workers are started lazily, on the first call that needs math-verify, with the ``forkserver``
  start method where the platform has it (else ``spawn``); never ``fork``, so no torch or CUDA
  thread state is copied into a worker. The fork server preloads
  :mod:`satseq.rewards.mv_engine` (math-verify and sympy) once, so a worker, and a replacement
  after a kill, starts in milliseconds;
- at most :data:`MAX_WORKERS` workers; a call takes an idle one (or starts one), sends the pair
  through a pipe and waits on ``poll(remaining)``. The deadline covers the wait for a free
  worker too, so a call never takes longer than ``timeout`` plus the kill (a few ms);
- on expiry the worker is killed (``SIGKILL``) and dropped; the next call starts a new one;
- ``atexit`` stops the workers; a forked child of the caller (``os.getpid()`` changed) starts
  its own workers instead of sharing the parent's pipes.

:func:`run` returns ``(status, value)`` with status ``"ok"``, ``"timeout"`` (the worker ran past
the deadline and was killed), ``"busy"`` (no worker came free before the deadline) or ``"error"``
(the worker died). It never raises.
"""
from __future__ import annotations

import atexit
import multiprocessing as mp
import os
import threading
import time
from typing import Any

__all__ = ["MAX_WORKERS", "run", "warm", "shutdown", "stats"]

#: Most worker processes alive at once (each is one process with sympy loaded, ~60 MB).
MAX_WORKERS = 2
_ENGINE = "satseq.rewards.mv_engine"


def _worker_main(conn, owner_pid: int) -> None:  # pragma: no cover - runs in the child
    """Serve ``(fn_args)`` requests from ``conn`` until EOF or ``None``; exit if the owner dies."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business

    def watch_owner() -> None:
        while True:
            time.sleep(1.0)
            try:
                os.kill(owner_pid, 0)
            except OSError:
                os._exit(0)

    threading.Thread(target=watch_owner, daemon=True).start()
    from satseq.rewards import mv_engine

    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            break
        if msg is None:
            break
        try:
            result = mv_engine.compare(*msg)
        except BaseException:  # noqa: BLE001 — any failure grades as "not equivalent"
            result = False
        try:
            conn.send(result)
        except (OSError, ValueError):
            break
    os._exit(0)


class _Worker:
    def __init__(self, ctx) -> None:
        self.conn, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=_worker_main, args=(child, os.getpid()), daemon=True,
                                name="satseq-grader")
        self.proc.start()
        child.close()

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.join(timeout=2.0)
        except Exception:  # noqa: BLE001
            pass
        try:
            self.conn.close()
        except Exception:  # noqa: BLE001
            pass

    def stop(self) -> None:
        try:
            self.conn.send(None)
            self.proc.join(timeout=0.5)
        except Exception:  # noqa: BLE001
            pass
        if self.proc.is_alive():
            self.kill()
        else:
            self.conn.close()


class _Pool:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.cv = threading.Condition()
        self.idle: list[_Worker] = []
        self.busy: set[_Worker] = set()
        self.starting = 0
        self.ctx = None
        self.started = 0
        self.killed = 0

    def context(self):
        if self.ctx is None:
            if "forkserver" in mp.get_all_start_methods():
                self.ctx = mp.get_context("forkserver")
                try:
                    self.ctx.set_forkserver_preload([_ENGINE])
                except Exception:  # noqa: BLE001 — a server already running keeps its preload
                    pass
            else:
                self.ctx = mp.get_context("spawn")
        return self.ctx

    def acquire(self, deadline: float) -> _Worker | None:
        with self.cv:
            while True:
                if self.idle:
                    w = self.idle.pop()
                    if w.proc.is_alive():
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
        try:  # start outside the lock: other callers keep using the idle workers meanwhile
            w = _Worker(self.context())
        except Exception:  # noqa: BLE001
            w = None
        with self.cv:
            self.starting -= 1
            if w is not None:
                self.busy.add(w)
                self.started += 1
            self.cv.notify()
        return w

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

    def shutdown(self) -> None:
        with self.cv:
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
        w.conn.send(args)
        if w.conn.poll(max(deadline - time.monotonic(), 0.0)):
            value = w.conn.recv()
            pool.release(w, alive=True)
            return "ok", value
        pool.release(w, alive=False)  # expired: kill it; the next call starts a fresh one
        return "timeout", None
    except Exception:  # noqa: BLE001 — a dead worker (EOF, broken pipe): drop it
        pool.release(w, alive=False)
        return "error", None


def warm(timeout: float = 60.0) -> bool:
    """Start a worker now (fork server and sympy import included) and grade one pair; True on success."""
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
