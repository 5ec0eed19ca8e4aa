"""Model-written Python run confined: bubblewrap's namespaces, resource limits, a size-capped
tmpfs as the only writable place, no network, and a kill at a wall-clock deadline.

The mechanism is `bubblewrap <https://github.com/containers/bubblewrap>`_ (``bwrap``, Debian's
``bubblewrap`` package; what Flatpak sandboxes applications with) and a seccomp filter around the
interpreter, and
:class:`satseq.utils.killable.KillableProcess` around bwrap (the math grader's worker pool uses the
same class). One call, :func:`run_python`:

1. the code goes into a memfd, which bwrap copies to ``/main.py`` (read-only) inside the sandbox;
2. a caller running as root starts bwrap as uid/gid 65534 (``nobody``) with no supplementary
   groups, so the sandbox's processes own nothing on the host (bwrap started by root would map its
   inner user to host uid 0, the owner of root's files); any other caller starts it as itself;
3. bwrap (``--unshare-all``) gives the program new user, PID, network, IPC, UTS and cgroup
   namespaces, drops every capability, forbids further user namespaces, and builds a root of its
   own: ``/usr`` read-only (with the ``/bin``, ``/lib``… links of a merged-usr system, and the
   interpreter's prefix when it lives elsewhere), a fresh ``/proc``, a minimal read-only ``/dev``
   and a ``tmpfs`` of ``tmp_mb`` MB at ``/tmp`` (also the working directory and ``HOME``); the rest
   of the host (``/work``, ``/home``, ``/root``, ``/etc``, ``/run``, its ``/tmp``) does not exist
   there. The root is read-only. The new network namespace has only its own loopback. Last, it
   installs the seccomp filter of :mod:`satseq.tools.seccomp` (libseccomp's BPF: the keyring,
   ``bpf``, ``io_uring``, ``ptrace``, mounts, new namespaces… refused with ``EPERM``);
4. util-linux ``prlimit``, inside the namespaces, sets ``RLIMIT_CPU``, ``RLIMIT_AS``,
   ``RLIMIT_NPROC`` (counted per user namespace, so it is this sandbox's process count),
   ``RLIMIT_FSIZE``, ``RLIMIT_NOFILE`` and ``RLIMIT_CORE=0``, then execs
   ``python3 -s -S -B /main.py`` in an environment of its own (``--clearenv``: ``PATH``, ``HOME``,
   ``LANG=C.UTF-8``, ``PYTHONHASHSEED=0``…), the standard library only;
5. stdout and stderr are read up to ``max_output_bytes`` each; at the cap, or at ``timeout_s``, the
   process group is killed (``SIGKILL``), and with bwrap's init gone the kernel kills every process
   left in the PID namespace, including those that started sessions of their own.

Where bwrap is missing or cannot create its namespaces here, or libseccomp is missing,
:func:`run_python` raises
:class:`SandboxUnavailable` with one line saying what to install or enable. It never runs the code
unconfined. docs/sandbox.md lists what this covers and what it does not.
"""
from __future__ import annotations

import math
import os
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from satseq.tools.registry import ToolUnavailable
from satseq.tools.seccomp import filter_bpf
from satseq.utils.killable import KillableProcess, Limits

__all__ = ["SandboxResult", "SandboxUnavailable", "run_python", "ensure_available", "format_result",
           "make_python_tool", "python_tool", "NOBODY"]

#: uid and gid a root caller runs the sandbox as (Debian's ``nobody`` / ``nogroup``).
NOBODY = 65534
#: Interpreters tried, in order, when ``python`` is not given (the first that exists).
PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3")
#: Where bwrap is looked for when it is not on ``PATH``.
BWRAP_PATHS = ("/usr/bin/bwrap", "/bin/bwrap")
INSTALL_HINT = "apt-get install bubblewrap (as root; `make setup` does it when run as root)"
_CODE_PATH = "/main.py"
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8",
        "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8",
        "OMP_NUM_THREADS": "1"}


class SandboxUnavailable(ToolUnavailable):
    """The sandbox cannot run here (bwrap missing or unable to create its namespaces)."""


@dataclass(frozen=True)
class SandboxResult:
    """One run. ``exit_code``: the program's status (``128 + n``: ended by signal ``n``, as bwrap
    reports it; negative: killed here at the deadline or the output cap); ``killed_reason``:
    ``"timeout"`` (wall clock), ``"cpu"`` (``RLIMIT_CPU``), ``"output"`` (the byte cap) or None;
    ``truncated``: a stream passed ``max_output_bytes`` and keeps that many bytes."""

    stdout: str
    stderr: str
    exit_code: int
    timed_out: bool
    truncated: bool
    killed_reason: str | None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.killed_reason is None


def find_bwrap() -> str:
    """The path of ``bwrap``; :class:`SandboxUnavailable` when it is not installed."""
    if not sys.platform.startswith("linux"):
        raise SandboxUnavailable(f"the Python sandbox needs Linux (bubblewrap); this is {sys.platform}")
    path = shutil.which("bwrap") or next((p for p in BWRAP_PATHS if os.access(p, os.X_OK)), None)
    if path is None:
        raise SandboxUnavailable(f"the Python sandbox needs bubblewrap (bwrap), which is not installed: {INSTALL_HINT}")
    return path


def find_python(python: str | None = None) -> str:
    """The interpreter the sandbox runs: ``python`` (a path), else the first of :data:`PYTHONS`."""
    if python is not None:
        if not os.path.isfile(python):
            raise SandboxUnavailable(f"the sandbox's interpreter {python} does not exist")
        return python
    for p in PYTHONS:
        if os.path.isfile(p):
            return p
    raise SandboxUnavailable(f"the Python sandbox needs a system Python 3 at {' or '.join(PYTHONS)}: apt-get install python3")


def _root_links() -> list[str]:
    """``/bin``, ``/lib``… as on the host: a symlink (merged /usr) is the same symlink, a directory a
    read-only bind."""
    args = []
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = Path("/") / name
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            args += ["--ro-bind", str(host), str(host)]
    return args


def _bwrap_argv(bwrap: str, python: str, code_fd: int, seccomp_fd: int, limits: Limits, tmp_mb: int,
                site_packages: bool) -> list[str]:
    argv = [bwrap, "--seccomp", str(seccomp_fd), "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--uid", str(NOBODY), "--gid", str(NOBODY), "--hostname", "sandbox",
            "--ro-bind", "/usr", "/usr", *_root_links()]
    real = os.path.realpath(python)
    if not real.startswith("/usr/"):  # an interpreter outside /usr: its prefix (…/bin/python3 -> …), read-only
        prefix = str(Path(real).parent.parent)
        argv += ["--ro-bind", prefix, prefix]
    argv += ["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev",
             "--size", str(tmp_mb << 20), "--tmpfs", "/tmp", "--chdir", "/tmp",
             "--ro-bind-data", str(code_fd), _CODE_PATH, "--remount-ro", "/", "--clearenv"]
    for k, v in _ENV.items():
        argv += ["--setenv", k, v]
    # not -I: it implies -E, which would drop PYTHONHASHSEED; the environment is bwrap's --clearenv + _ENV
    flags = ["-s", "-B"] + ([] if site_packages else ["-S"])
    prlimit = shutil.which("prlimit", path="/usr/bin:/bin") or "/usr/bin/prlimit"
    return argv + ["--", *limits.wrap([python, *flags, _CODE_PATH], prlimit=prlimit)]


def _memfd(name: str, data: bytes) -> int:
    """An in-memory file holding ``data``, at offset 0 (bwrap reads it from its inherited fd)."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _seccomp_filter() -> bytes:
    try:
        return filter_bpf()
    except (ImportError, OSError, RuntimeError) as e:
        raise SandboxUnavailable(f"the Python sandbox's seccomp filter needs pyseccomp and libseccomp ({e}): "
                                 "pip install pyseccomp (satseq's dependency) and apt-get install libseccomp2") from None


def _validate(**limits) -> None:
    """One-line ValueError for a limit that is not a positive number (an integer, but for
    ``timeout_s``); ``cpu_s`` may be None."""
    for name, value in limits.items():
        if name == "cpu_s" and value is None:
            continue
        integer = name != "timeout_s"
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
        if not ok or (integer and not isinstance(value, int)):
            raise ValueError(f"run_python: {name} must be a positive {'integer' if integer else 'number'}, got {value!r}")


def _run(code: str, *, timeout_s: float, cpu_s: int | None, memory_mb: int, max_processes: int, file_mb: int,
         tmp_mb: int, max_output_bytes: int, python: str | None, site_packages: bool) -> SandboxResult:
    bwrap, exe = find_bwrap(), find_python(python)
    limits = Limits(cpu_s=cpu_s if cpu_s is not None else max(1, math.ceil(timeout_s)), memory_mb=memory_mb,
                    processes=max_processes, file_mb=file_mb, open_files=256, core=0)
    bpf = _seccomp_filter()
    fd = _memfd("satseq-sandbox-code", code.encode("utf-8", errors="surrogatepass"))
    sfd = _memfd("satseq-sandbox-seccomp", bpf)
    try:
        argv = _bwrap_argv(bwrap, exe, fd, sfd, limits, tmp_mb, site_packages)
        deadline = time.monotonic() + timeout_s
        try:
            child = KillableProcess(argv, env={"PATH": "/usr/bin:/bin"}, pass_fds=(fd, sfd),
                                    user=NOBODY if os.geteuid() == 0 else None)
        except OSError as e:
            raise SandboxUnavailable(f"could not start bubblewrap ({bwrap}): {e.strerror or e}") from None
    finally:
        os.close(fd)
        os.close(sfd)
    cap = child.communicate(deadline, max_output_bytes)
    reason = "timeout" if cap.timed_out else "output" if cap.truncated else "cpu" if cap.exit_code == 128 + signal.SIGXCPU else None
    return SandboxResult(stdout=cap.stdout.decode("utf-8", errors="replace"),
                         stderr=cap.stderr.decode("utf-8", errors="replace"),
                         exit_code=cap.exit_code, timed_out=cap.timed_out, truncated=cap.truncated, killed_reason=reason)


_available: set[tuple[int, str | None, bool]] = set()
_available_lock = threading.Lock()


def ensure_available(python: str | None = None, site_packages: bool = False) -> None:
    """Check once per process (and interpreter) that bwrap starts a sandbox here that runs Python;
    :class:`SandboxUnavailable`, one line, when it does not (bwrap missing, user namespaces
    disabled, an interpreter the sandbox cannot read). Call it when a run starts, to stop at once."""
    key = (os.getpid(), python, site_packages)
    if key in _available:
        return
    with _available_lock:
        if key in _available:
            return
        r = _run("print('ok')", timeout_s=30.0, cpu_s=None, memory_mb=512, max_processes=8, file_mb=1, tmp_mb=1,
                 max_output_bytes=4096, python=python, site_packages=site_packages)
        if not (r.exit_code == 0 and r.stdout == "ok\n"):
            why = (r.stderr.strip().splitlines() or [f"exit status {r.exit_code}"])[-1]
            raise SandboxUnavailable(f"bubblewrap cannot start the Python sandbox here ({why}); it needs unprivileged "
                                     "user namespaces (sysctl user.max_user_namespaces > 0) and a python3 under /usr")
        _available.add(key)


def run_python(code: str, *, timeout_s: float = 5.0, cpu_s: int | None = None, memory_mb: int = 512,
               max_processes: int = 8, file_mb: int = 16, tmp_mb: int = 64, max_output_bytes: int = 65536,
               python: str | None = None, site_packages: bool = False) -> SandboxResult:
    """Run ``code`` in the sandbox (module doc) and return what it printed.

    ``timeout_s``: wall clock, start-up included; ``cpu_s``: CPU seconds per process (default
    ``ceil(timeout_s)``); ``memory_mb``: address space per process; ``max_processes``: processes
    and threads at once; ``file_mb``: largest file; ``tmp_mb``: the size of ``/tmp``;
    ``max_output_bytes``: kept of stdout and of stderr each (past it the program is killed);
    ``python``: the interpreter (default: the first of :data:`PYTHONS`); ``site_packages``: put
    that interpreter's site-packages on ``sys.path`` (default: the standard library only).
    Raises :class:`SandboxUnavailable` when the sandbox cannot run here, ValueError on a bad limit."""
    if not isinstance(code, str):
        raise TypeError(f"run_python: code must be a str, got {type(code).__name__}")
    _validate(timeout_s=timeout_s, cpu_s=cpu_s, memory_mb=memory_mb, max_processes=max_processes, file_mb=file_mb,
              tmp_mb=tmp_mb, max_output_bytes=max_output_bytes)
    ensure_available(python, site_packages)
    return _run(code, timeout_s=float(timeout_s), cpu_s=cpu_s, memory_mb=memory_mb,
                max_processes=max_processes + 1,  # + bwrap's init, pid 1 of the namespace
                file_mb=file_mb, tmp_mb=tmp_mb, max_output_bytes=max_output_bytes, python=python,
                site_packages=site_packages)


def format_result(r: SandboxResult, *, timeout_s: float, max_output_bytes: int) -> str:
    """The tool message the model reads: stdout, then stderr (a traceback), then a last line
    ``error: …`` when the program failed, was stopped, or printed too much. At a time limit the
    partial output is dropped (how far a program got before a kill depends on the machine's load;
    the message does not), and a time limit reads the same whether wall clock or CPU time hit it."""
    if r.killed_reason in ("timeout", "cpu"):
        return f"error: time limit exceeded ({timeout_s:g} s); the program was stopped"
    if r.truncated:
        # only a stream that passed the cap is kept: its first bytes do not depend on timing
        kept = [s for s in (r.stdout, r.stderr) if len(s.encode("utf-8", errors="replace")) >= max_output_bytes]
        return "\n".join([*kept, f"error: output exceeded {max_output_bytes} bytes; the program was stopped"])
    parts = [s.rstrip("\n") for s in (r.stdout, r.stderr) if s]
    if r.exit_code != 0:
        sig = r.exit_code - 128  # bwrap's status for a program ended by a signal
        name = signal.Signals(sig).name if sig in set(signal.Signals) else None
        parts.append(f"error: exit status {r.exit_code}" + (f" (killed by {name})" if name else ""))
    return "\n".join(parts) if parts else "(no output)"


def make_python_tool(*, timeout_s: float = 5.0, max_output_bytes: int = 16384, **limits) -> Callable[[str], str]:
    """The ``python`` tool with these limits (the keywords of :func:`run_python`); its schema comes
    from its signature and docstring (``transformers.utils.get_json_schema``)."""
    known = run_python.__kwdefaults__
    opts = dict(limits, timeout_s=timeout_s, max_output_bytes=max_output_bytes)
    bad = sorted(set(opts) - set(known))
    if bad:
        raise ValueError(f"make_python_tool: unknown limit {bad[0]!r} (known: {', '.join(sorted(known))})")
    _validate(**{k: v for k, v in opts.items() if k not in ("python", "site_packages")})

    def python(code: str) -> str:
        """
        Run a Python 3 program in a sandbox and return what it printed (stdout, then stderr).
        Only the standard library is available, there is no network, and the program is stopped
        at its time limit. Print the values you want to see.

        Args:
            code: The complete Python program to run.
        """
        return format_result(run_python(code, **opts), timeout_s=timeout_s, max_output_bytes=max_output_bytes)

    return python


#: The ``python`` tool with the default limits (5 s, 512 MB, 8 processes, 16 KB of output).
python_tool = make_python_tool()
