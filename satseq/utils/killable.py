"""A child process that can always be stopped: its own process group, resource limits set before
its program runs, a deadline on every wait, and ``SIGKILL`` to the whole group.

One mechanism for the two places that run code which may never return: the math grader's worker
pool (:mod:`satseq.rewards.grading_pool`: sympy can run for minutes on a short answer) and the
Python sandbox (:mod:`satseq.tools.sandbox`: model-written code).

- **Process group.** The child starts a new session (``setsid``: ``start_new_session=True``), so
  :meth:`KillableProcess.kill` reaches its children too (``killpg``), short of a child that starts a
  session of its own; the sandbox adds a PID namespace for those (every process in it dies with its
  first one, ``pid_namespaces(7)``).
- **Limits** are ``setrlimit(2)`` values applied by util-linux's ``prlimit`` in front of the
  program (``prlimit --as=… -- python …``): an exec chain, so no ``preexec_fn`` runs Python code in
  the forked child of a process with threads (unsafe: the :mod:`subprocess` docs). A caller puts
  :meth:`Limits.wrap` where the limits must start (the sandbox: inside its namespaces, so that the
  process count is the sandbox's own; ``RLIMIT_NPROC`` counts per user namespace and uid).
- **Deadlines.** :func:`wait_readable` waits on pipes with ``poll`` until an absolute
  ``time.monotonic()`` deadline; :meth:`KillableProcess.communicate` reads stdout and stderr up to
  a byte cap each and kills the group at the deadline or at the cap.

POSIX only.
"""
from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Sequence

__all__ = ["Limits", "Captured", "KillableProcess", "wait_readable"]


@dataclass(frozen=True)
class Limits:
    """``setrlimit`` values for a child (None: inherited).

    ``cpu_s``: ``RLIMIT_CPU`` (soft; ``SIGXCPU`` there, ``SIGKILL`` one second later);
    ``memory_mb``: ``RLIMIT_AS``, the address space of each process; ``processes``:
    ``RLIMIT_NPROC``; ``file_mb``: ``RLIMIT_FSIZE``, the largest file a process may write (Python
    ignores ``SIGXFSZ``, so a write past it fails with ``EFBIG``); ``open_files``:
    ``RLIMIT_NOFILE``; ``core``: ``RLIMIT_CORE`` (0: no core dumps)."""

    cpu_s: int | None = None
    memory_mb: int | None = None
    processes: int | None = None
    file_mb: int | None = None
    open_files: int | None = None
    core: int | None = None

    def __post_init__(self) -> None:
        for name in ("cpu_s", "memory_mb", "processes", "file_mb", "open_files", "core"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < (0 if name == "core" else 1)):
                raise ValueError(f"Limits.{name} must be a positive integer or None, got {v!r}")

    def prlimit_args(self) -> list[str]:
        """The ``prlimit`` options for these limits (soft = hard, except CPU: hard = soft + 1 s)."""
        args = []
        if self.cpu_s is not None:
            args.append(f"--cpu={self.cpu_s}:{self.cpu_s + 1}")
        if self.memory_mb is not None:
            args.append(f"--as={self.memory_mb << 20}")
        if self.processes is not None:
            args.append(f"--nproc={self.processes}")
        if self.file_mb is not None:
            args.append(f"--fsize={self.file_mb << 20}")
        if self.open_files is not None:
            args.append(f"--nofile={self.open_files}")
        if self.core is not None:
            args.append(f"--core={self.core}")
        return args

    def wrap(self, argv: Sequence[str], prlimit: str | None = None) -> list[str]:
        """``argv`` run under these limits: ``[prlimit, options…, "--", *argv]`` (``argv`` itself when
        no limit is set). ``prlimit``: its path (default: found on ``PATH``)."""
        args = self.prlimit_args()
        if not args:
            return list(argv)
        exe = prlimit or shutil.which("prlimit") or "/usr/bin/prlimit"
        return [exe, *args, "--", *argv]


@dataclass(frozen=True)
class Captured:
    """What :meth:`KillableProcess.communicate` read. ``exit_code``: the process's status
    (negative: the signal that ended it, as :mod:`subprocess` reports); ``timed_out``: killed at the
    deadline; ``truncated``: a stream passed ``max_bytes`` and the process was killed there (each
    stream keeps at most ``max_bytes``)."""

    stdout: bytes
    stderr: bytes
    exit_code: int
    timed_out: bool
    truncated: bool


def wait_readable(fds: Sequence[int], deadline: float) -> list[int]:
    """The fds of ``fds`` that are readable (data, EOF or error) by ``deadline`` (``time.monotonic()``);
    ``[]`` once it has passed. ``poll`` where the platform has it (no ``FD_SETSIZE`` limit in a
    process with many open files), else ``select``."""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return []
        if hasattr(select, "poll"):
            poller = select.poll()
            for fd in fds:
                poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
            ready = [fd for fd, _ in poller.poll(max(remaining * 1000.0, 1.0))]
        else:
            ready, _, _ = select.select(list(fds), [], [], remaining)
        if ready:
            return ready


class KillableProcess:
    """``argv`` started in its own session with pipes, killable as a process group.

    ``user``/``group``: run as this uid/gid with no supplementary groups (a root caller dropping
    privileges; :mod:`subprocess` does it between fork and exec). ``stdin``/``stdout``/``stderr``:
    :mod:`subprocess` constants (``PIPE``, ``DEVNULL``). ``pass_fds``: fds the child inherits."""

    def __init__(self, argv: Sequence[str], *, env: dict | None = None, stdin: int = subprocess.DEVNULL,
                 stdout: int = subprocess.PIPE, stderr: int = subprocess.PIPE, user: int | None = None,
                 group: int | None = None, pass_fds: Sequence[int] = ()) -> None:
        ids = {} if user is None else {"user": user, "group": user if group is None else group, "extra_groups": []}
        self.proc = subprocess.Popen(
            list(argv), stdin=stdin, stdout=stdout, stderr=stderr, env=env, close_fds=True, bufsize=0,
            start_new_session=True, pass_fds=tuple(pass_fds), **ids,
        )
        self.pid = self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """``SIGKILL`` to the process group (the child is its leader), reap the child, close the pipes."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.kill()
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=2.0)
        except Exception:  # noqa: BLE001
            pass
        self.close()

    def close(self) -> None:
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f is not None:
                try:
                    f.close()
                except Exception:  # noqa: BLE001
                    pass

    def communicate(self, deadline: float, max_bytes: int) -> Captured:
        """Read stdout and stderr (both pipes) until both close and the process exits; kill the group
        at ``deadline`` (``time.monotonic()``) or as soon as a stream passes ``max_bytes``."""
        out_fd = self.proc.stdout.fileno() if self.proc.stdout is not None else None
        err_fd = self.proc.stderr.fileno() if self.proc.stderr is not None else None
        streams = {fd: bytearray() for fd in (out_fd, err_fd) if fd is not None}
        open_fds = list(streams)
        timed_out = truncated = False
        while open_fds:
            ready = wait_readable(open_fds, deadline)
            if not ready:
                timed_out = True
                break
            for fd in ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    open_fds.remove(fd)
                    continue
                buf = streams[fd]
                buf += chunk
                if len(buf) > max_bytes:
                    del buf[max_bytes:]
                    truncated = True
            if truncated:
                break
        if not (timed_out or truncated):
            try:
                self.proc.wait(timeout=max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                timed_out = True
        if timed_out or truncated:
            self.kill()
        else:
            self.close()
        code = self.proc.returncode if self.proc.returncode is not None else -signal.SIGKILL
        out = bytes(streams.get(out_fd, b""))
        err = bytes(streams.get(err_fd, b""))
        return Captured(out, err, code, timed_out, truncated)
