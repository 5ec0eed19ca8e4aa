"""The child-process mechanism the grading pool and the sandbox share (satseq/utils/killable.py):
a kill reaches the whole process group, waits end at their deadline, output stops at its cap, and
limits are applied before the program runs."""
from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

import pytest

from satseq.utils.killable import KillableProcess, Limits, wait_readable


def _cmdline(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # it ended meanwhile
        return b""


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] != "Z"
    except OSError:
        return False


def test_kill_reaches_the_process_group():
    token = str(random.randrange(10**8, 10**9))
    child = KillableProcess(["/bin/sh", "-c", f"sleep 100 0.{token} & sleep 100 0.{token} & echo started; wait"])
    sleep = b"\0".join([b"sleep", b"100", f"0.{token}".encode()]) + b"\0"  # the two sleeps' command line
    assert wait_readable([child.proc.stdout.fileno()], time.monotonic() + 10)
    time.sleep(0.2)
    pids = [int(d) for d in os.listdir("/proc") if d.isdigit() and int(d) != os.getpid()
            and _cmdline(d) == sleep]
    assert len(pids) == 2 and all(os.getpgid(p) == child.pid for p in pids)  # its own group
    child.kill()
    time.sleep(0.2)
    assert not any(_alive(p) for p in pids) and not child.alive()


def test_communicate_ends_at_the_deadline_and_at_the_cap():
    start = time.monotonic()
    cap = KillableProcess([sys.executable, "-c", "import time; print('hi', flush=True); time.sleep(60)"]).communicate(
        time.monotonic() + 1.0, 1000)
    assert 1.0 <= time.monotonic() - start < 3.0
    assert cap.timed_out and not cap.truncated and cap.stdout == b"hi\n" and cap.exit_code == -9
    cap = KillableProcess([sys.executable, "-c", "import sys\nwhile True: sys.stdout.write('z' * 9999)"]).communicate(
        time.monotonic() + 30.0, 12345)
    assert cap.truncated and not cap.timed_out and cap.stdout == b"z" * 12345
    cap = KillableProcess([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(4)"]
                          ).communicate(time.monotonic() + 30.0, 1000)
    assert (cap.stdout, cap.stderr, cap.exit_code, cap.timed_out, cap.truncated) == (b"out\n", b"err\n", 4, False, False)


def test_wait_readable_returns_nothing_after_the_deadline():
    r, w = os.pipe()
    try:
        start = time.monotonic()
        assert wait_readable([r], time.monotonic() + 0.3) == []
        assert time.monotonic() - start >= 0.3
        os.write(w, b"x")
        assert wait_readable([r], time.monotonic() + 5) == [r]
    finally:
        os.close(r)
        os.close(w)


def test_limits_apply_before_the_program_runs():
    code = ("import resource as r; print(*(r.getrlimit(getattr(r, k)) for k in "
            "('RLIMIT_CPU', 'RLIMIT_AS', 'RLIMIT_NPROC', 'RLIMIT_FSIZE', 'RLIMIT_NOFILE', 'RLIMIT_CORE')))")
    limits = Limits(cpu_s=3, memory_mb=700, processes=50, file_mb=2, open_files=99, core=0)
    cap = KillableProcess(limits.wrap([sys.executable, "-c", code])).communicate(time.monotonic() + 30, 10000)
    assert cap.exit_code == 0, cap
    assert cap.stdout.decode().split() == "(3, 4) (734003200, 734003200) (50, 50) (2097152, 2097152) (99, 99) (0, 0)".split()
    assert Limits().wrap(["x"]) == ["x"]  # no limit: the program itself, no prlimit
    with pytest.raises(ValueError, match="memory_mb"):
        Limits(memory_mb=0)
