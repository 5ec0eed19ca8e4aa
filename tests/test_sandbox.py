"""The Python sandbox (satseq/tools/sandbox.py; docs/sandbox.md): hostile programs end in a tool error
message, the test process lives on, nothing outside the sandbox's /tmp changes, and no process of the
sandbox outlives the call.

Every hostile program runs through ``python_tool``-style formatting (:func:`format_result`) as the model
would read it, and through :func:`run_python` for the facts behind the message. Deadlines are short
(1-3 s); the machine may be loaded, so a time bound is the deadline plus a margin, never a speed.
"""
from __future__ import annotations

import hashlib
import os
import platform
import random
import shutil
import socket
import stat
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

import satseq
from satseq.tools import sandbox
from satseq.tools.parsers import ToolCall
from satseq.tools.registry import execute_tool_call
from satseq.tools.sandbox import SandboxUnavailable, format_result, make_python_tool, python_tool, run_python

REPO = Path(__file__).resolve().parents[1]
MARGIN_S = 1.5  # a kill at the deadline, plus bwrap's teardown, on a loaded machine


def tool_text(code: str, **kw) -> tuple[str, sandbox.SandboxResult]:
    kw.setdefault("timeout_s", 2.0)
    kw.setdefault("max_output_bytes", 4096)
    r = run_python(textwrap.dedent(code), **kw)
    return format_result(r, timeout_s=kw["timeout_s"], max_output_bytes=kw["max_output_bytes"]), r


def ends_in_error(text: str) -> bool:
    return text.splitlines()[-1].startswith("error: ")


def snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every path under ``root``: (mode, size, sha256 of a file's bytes)."""
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else ""
        out[str(p.relative_to(root))] = (st.st_mode, st.st_size, digest)
    return out


def processes_with(token: str) -> list[int]:
    """PIDs of host processes whose command line holds ``token``."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            if token.encode() in Path(f"/proc/{d}/cmdline").read_bytes():
                found.append(int(d))
        except OSError:
            continue
    return found


@pytest.fixture
def world_dir():
    """A host directory that any user may reach and write (pytest's own are root's, mode 0700), so that
    only the sandbox keeps the code out of it."""
    d = Path(tempfile.mkdtemp(prefix="satseq-sandbox-test-"))
    d.chmod(0o777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def outside(world_dir):
    """A world-writable directory outside the sandbox with a world-writable canary file in it."""
    d = world_dir / "outside"
    d.mkdir()
    canary = d / "canary.txt"
    canary.write_text("do not touch\n")
    d.chmod(0o777)
    canary.chmod(0o666)
    return d


# ------------------------------------------------------------------------------------ ordinary code


def test_normal_code_returns_its_stdout():
    r = run_python("import math\nprint(math.comb(10, 3))\nprint(sum(i * i for i in range(5)))")
    assert r.ok and r.stdout == "120\n30\n" and r.stderr == ""
    assert python_tool("print(6 * 7)") == "42"
    assert python_tool("x = 1") == "(no output)"


def test_the_sandbox_writes_its_own_tmp_only():
    text, r = tool_text("""
        import os
        with open("notes.txt", "w") as f:
            f.write("kept")
        print(os.getcwd(), open("/tmp/notes.txt").read(), os.listdir("/tmp"))
    """)
    assert r.ok, text
    assert text == "/tmp kept ['notes.txt']"  # its /tmp starts empty (the code itself is /main.py, read-only)


def test_a_run_is_deterministic():
    # str hashes and set order: random per process unless PYTHONHASHSEED is fixed (the sandbox fixes it)
    code = "print(hash('satseq'), list({'a', 'b', 'c', 'd', 'e'}), __import__('os').getpid())"
    first = python_tool(code)
    assert all(python_tool(code) == first for _ in range(2))
    assert first.split()[-1] == "2"  # pid 2 of a fresh PID namespace (1 is bwrap's init), every time


def test_errors_are_text_with_the_traceback():
    text = python_tool("def f():\n    return 1 / 0\nf()")
    assert "ZeroDivisionError: division by zero" in text and 'File "/main.py", line 2' in text
    assert text.endswith("error: exit status 1")
    assert python_tool("import sys; print('partial'); sys.exit(3)") == "partial\nerror: exit status 3"
    assert python_tool("def (:") .endswith("error: exit status 1")


def test_the_tool_has_a_schema_from_its_docstring():
    from transformers.utils import get_json_schema

    schema = get_json_schema(python_tool)
    fn = schema["function"]
    assert fn["name"] == "python" and "sandbox" in fn["description"]
    assert fn["parameters"]["required"] == ["code"]
    assert fn["parameters"]["properties"]["code"]["type"] == "string"


def test_limits_are_checked_up_front():
    with pytest.raises(ValueError, match="memory_mb"):
        run_python("print(1)", memory_mb=0)
    with pytest.raises(ValueError, match="timeout_s"):
        run_python("print(1)", timeout_s=float("inf"))
    with pytest.raises(ValueError, match="unknown limit 'memory'"):
        make_python_tool(memory=64)
    with pytest.raises(ValueError, match="max_processes"):
        make_python_tool(max_processes=-1)


# --------------------------------------------------------------------------------- hostile programs


def test_infinite_loop():
    start = time.monotonic()
    text, r = tool_text("while True:\n    pass", timeout_s=2.0, cpu_s=1)
    assert time.monotonic() - start < 2.0 + MARGIN_S
    assert r.killed_reason in ("cpu", "timeout"), r  # RLIMIT_CPU first, unless the machine is busy
    assert text == "error: time limit exceeded (2 s); the program was stopped"


def test_code_that_never_returns_is_killed_at_its_deadline():
    token = str(random.randrange(10**8, 10**9))
    start = time.monotonic()
    text, r = tool_text(f"""
        import os, subprocess, time
        subprocess.Popen(["setsid", "sleep", "1000", "0.{token}"])   # a session of its own
        if os.fork() == 0:
            os.setsid()
            os.execv("/usr/bin/sleep", ["sleep", "1000", "0.{token}"])
        print("sleeping", flush=True)
        time.sleep(10 ** 6)
    """, timeout_s=1.5)
    elapsed = time.monotonic() - start
    assert 1.5 <= elapsed < 1.5 + MARGIN_S, elapsed
    assert r.timed_out and r.killed_reason == "timeout" and r.exit_code < 0
    assert text == "error: time limit exceeded (1.5 s); the program was stopped"  # partial output dropped
    time.sleep(0.2)
    assert processes_with(f"0.{token}") == []  # the PID namespace took its detached children with it


def test_fork_bomb():
    token = str(random.randrange(10**8, 10**9))
    start = time.monotonic()
    text, r = tool_text(f"""
        import os, time
        marker = "{token}"
        while True:
            os.fork()
    """, timeout_s=2.0, max_processes=8)
    assert time.monotonic() - start < 2.0 + MARGIN_S
    assert ends_in_error(text), text
    assert "BlockingIOError" in r.stderr or r.killed_reason in ("cpu", "timeout"), r
    time.sleep(0.2)
    assert processes_with(token) == []


def test_the_process_limit_holds():
    text, r = tool_text("""
        import os, time
        n = 0
        try:
            while True:
                if os.fork() == 0:
                    time.sleep(30)
                    os._exit(0)
                n += 1
        except OSError as e:
            print(n, type(e).__name__)
    """, timeout_s=3.0, max_processes=6)
    assert r.ok, text
    forked, err = text.split()
    assert err == "BlockingIOError" and int(forked) == 5  # 6 processes: this one and 5 children


def test_the_process_limit_is_each_sandboxs_own():
    """A sandbox at its process limit does not take the next one's: RLIMIT_NPROC is set inside the
    namespaces, where it counts per user namespace, not across every process of uid 65534."""
    token = str(random.randrange(10**8, 10**9))
    full = {}
    holder = threading.Thread(target=lambda: full.update(r=tool_text(f"""
        import os
        try:
            while True:
                if os.fork() == 0:
                    os.execv("/usr/bin/sleep", ["sleep", "30", "0.{token}"])
        except OSError:
            os.execv("/usr/bin/sleep", ["sleep", "30", "0.{token}"])
    """, timeout_s=4.0, max_processes=6)))
    holder.start()
    deadline = time.monotonic() + 4.0
    while len(processes_with(f"0.{token}")) < 6 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(processes_with(f"0.{token}")) == 6  # the first sandbox is at its limit (5 children and itself)
    text, r = tool_text("""
        import os, time
        n = 0
        for _ in range(3):
            if os.fork() == 0:
                time.sleep(5)
                os._exit(0)
            n += 1
        print(n, "forked")
    """, max_processes=4)
    holder.join(10)
    assert text == "3 forked", text
    assert full["r"][1].killed_reason == "timeout"


def test_memory_bomb():
    text, r = tool_text("""
        chunks = []
        while True:
            chunks.append(bytearray(16 * 2**20))
    """, memory_mb=128, timeout_s=3.0)
    assert "MemoryError" in text and text.endswith("error: exit status 1"), text
    text, _ = tool_text("x = bytearray(4 * 2**30)", memory_mb=128)
    assert "MemoryError" in text and ends_in_error(text)


def test_a_full_tmp_is_an_error_not_a_full_disk():
    text, r = tool_text("""
        with open("big", "wb") as f:
            for _ in range(64):
                f.write(b"x" * 2**20)
    """, tmp_mb=8, file_mb=32, timeout_s=3.0)
    assert "No space left on device" in text and ends_in_error(text), text
    text, _ = tool_text("open('big', 'wb').write(b'x' * 3 * 2**20)", tmp_mb=8, file_mb=1)
    assert "File too large" in text and ends_in_error(text), text


def test_network_connection():
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        text, r = tool_text(f"""
            import socket
            for addr in [("127.0.0.1", {port}), ("1.1.1.1", 53), ("8.8.8.8", 443)]:
                try:
                    socket.create_connection(addr, timeout=0.5)
                    print("CONNECTED", addr)
                except OSError as e:
                    print("refused", type(e).__name__)
            try:
                socket.getaddrinfo("pypi.org", 443)
                print("RESOLVED")
            except OSError as e:
                print("no dns", type(e).__name__)
            raise SystemExit(1)
        """, timeout_s=3.0)
        assert "CONNECTED" not in text and "RESOLVED" not in text, text
        assert text.count("refused") == 3 and ends_in_error(text)
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing reached the host's listener
    finally:
        listener.close()


def test_a_unix_socket_on_the_host_is_out_of_reach(world_dir):
    path = world_dir / "host.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    server.setblocking(False)
    os.chmod(path, 0o777)
    try:
        text, _ = tool_text(f"""
            import socket
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect({str(path)!r})
            print("CONNECTED")
        """)
        assert "CONNECTED" not in text and "FileNotFoundError" in text and ends_in_error(text), text
        with pytest.raises(BlockingIOError):
            server.accept()
    finally:
        server.close()


def test_writing_outside_and_deleting_files(outside):
    canary = outside / "canary.txt"
    before = snapshot(outside.parent)
    text, r = tool_text(f"""
        import os, shutil
        attempts = {{
            "delete the canary": lambda: os.remove({str(canary)!r}),
            "overwrite the canary": lambda: open({str(canary)!r}, "w").write("gone"),
            "remove its directory": lambda: shutil.rmtree({str(outside)!r}),
            "new file beside it": lambda: open({str(outside / 'new.txt')!r}, "w").write("x"),
            "write to /usr": lambda: open("/usr/evil", "w").write("x"),
            "write to /": lambda: open("/evil", "w").write("x"),
            "replace the code": lambda: open("/main.py", "w").write("x"),
            "write to /dev": lambda: open("/dev/evil", "w").write("x"),
            "delete the interpreter": lambda: os.remove("/usr/bin/python3"),
            "chmod a system file": lambda: os.chmod("/usr/bin/env", 0o777),
        }}
        failed = 0
        for what, attempt in attempts.items():
            try:
                attempt()
                print("DONE", what)
            except OSError as e:
                failed += 1
        print(failed, "of", len(attempts), "failed")
        raise SystemExit(0 if failed == 0 else 1)
    """)
    assert "DONE" not in text, text
    assert "10 of 10 failed" in text and ends_in_error(text)
    assert snapshot(outside.parent) == before
    assert canary.read_text() == "do not touch\n"
    assert os.path.exists("/usr/bin/python3") and not os.path.exists("/usr/evil") and not os.path.exists("/evil")
    assert stat.S_IMODE(os.stat("/usr/bin/env").st_mode) != 0o777


def test_reading_the_projects_files():
    secrets = [REPO / "pyproject.toml", Path(satseq.__file__), REPO / "satseq" / "tools" / "sandbox.py",
               Path.home() / ".bashrc", Path("/etc/passwd")]
    text, r = tool_text(f"""
        import os
        paths = {[str(p) for p in secrets]!r}
        for p in paths:
            try:
                print("READ", p, len(open(p).read()))
            except OSError as e:
                print("no", type(e).__name__)
        for d in ["/work", "/home", "/root", "/etc", "/run", "/var"]:
            print(d, "exists" if os.path.exists(d) else "absent")
        try:
            import satseq
            print("IMPORTED satseq")
        except ImportError:
            print("no satseq")
        raise SystemExit(1)
    """)
    assert "READ" not in text and "IMPORTED" not in text, text
    assert text.count("no FileNotFoundError") == len(secrets)
    assert all(f"{d} absent" in text for d in ["/work", "/home", "/root", "/etc", "/run", "/var"])
    assert ends_in_error(text)


def test_spawning_a_shell_is_contained(outside):
    """A shell may start (the sandbox does not forbid exec), but it runs inside the same namespaces and
    limits: no project files, no network, nothing outside /tmp."""
    canary = outside / "canary.txt"
    before = snapshot(outside.parent)
    text, r = tool_text(f"""
        import subprocess
        script = (
            "id -u; "
            "rm {canary} && echo DELETED; "
            "echo gone > {canary} && echo OVERWROTE; "
            "cat {REPO / 'pyproject.toml'} && echo READ; "
            "ls /work && echo LISTED; "
            "touch /tmp/ok && echo TMP-OK; "
            "exit 7"
        )
        p = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True)
        print(p.stdout, end="")
        print("status", p.returncode)
        raise SystemExit(p.returncode)
    """)
    lines = text.splitlines()
    assert lines[0] == str(sandbox.NOBODY)  # not root inside
    for done in ("DELETED", "OVERWROTE", "READ", "LISTED"):
        assert done not in lines, text
    assert "TMP-OK" in lines and "status 7" in lines and text.endswith("error: exit status 7")
    assert snapshot(outside.parent) == before and canary.read_text() == "do not touch\n"


def test_the_sandbox_is_not_root_on_the_host():
    """Host root's files (mode 0600, uid 0) stay unreadable: a root caller runs bwrap as nobody."""
    text, _ = tool_text("""
        import os
        print(os.getuid(), os.getgid(), os.getgroups())
        print(open("/proc/self/status").read().split("CapEff:")[1].split()[0])
    """)
    uid, caps = text.splitlines()
    assert uid == f"{sandbox.NOBODY} {sandbox.NOBODY} []" and int(caps, 16) == 0


def test_output_of_100_mb():
    start = time.monotonic()
    text, r = tool_text("import sys\nsys.stdout.write('x' * 100_000_000)\nprint('END')", timeout_s=5.0,
                        max_output_bytes=65536)
    assert time.monotonic() - start < 5.0  # stopped at the cap, not at the deadline
    assert r.truncated and r.killed_reason == "output" and len(r.stdout) == 65536 and set(r.stdout) == {"x"}
    assert text.endswith("error: output exceeded 65536 bytes; the program was stopped")
    assert len(text) < 65536 + 100
    text, r = tool_text("import sys\nwhile True:\n    sys.stderr.write('y' * 4096)", max_output_bytes=10000)
    assert r.truncated and len(r.stderr) == 10000 and ends_in_error(text)


def test_the_caller_lives_on_and_other_threads_keep_working():
    """Several hostile programs at once from threads (as a trainer's rollout would run them)."""
    codes = ["while True: pass", "import os\nwhile True: os.fork()", "x = bytearray(2**40)", "print(7)"]
    out = [None] * len(codes)

    def run(i):  # the ordinary program gets time to spare beside the busy ones on a small machine
        out[i] = tool_text(codes[i], timeout_s=2.0 if i < 3 else 20.0, cpu_s=1)[0]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(codes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert all(ends_in_error(t) for t in out[:3]), out
    assert out[3] == "7"


def test_the_seccomp_filter_refuses_kernel_extension_points():
    """keyctl, io_uring, kcmp, unshare, ptrace: allowed on the host (the control, run by the same code
    outside the sandbox), EPERM inside (satseq/tools/seccomp.py). Threads and exec still work."""
    import subprocess
    import sys

    import pyseccomp

    arch = pyseccomp.system_arch()
    calls = {  # name: arguments that succeed for an ordinary process
        "keyctl": (0, -3, 0),                                   # KEYCTL_GET_KEYRING_ID of the session keyring
        "io_uring_setup": (1, "buf"),
        "kcmp": ("pid", "pid", 0, 0, 0),                        # KCMP_FILE of fd 0 with itself
        "unshare": (0,),                                        # no flags: a no-op
        "ptrace": (0, 0, 0, 0),                                 # PTRACE_TRACEME
    }
    numbers = {name: pyseccomp.resolve_syscall(arch, name) for name in calls}
    probe = textwrap.dedent(f"""
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        buf = ctypes.create_string_buffer(120)
        for name, args in {calls!r}.items():
            args = [ctypes.byref(buf) if a == "buf" else os.getpid() if a == "pid" else a for a in args]
            r = libc.syscall({numbers!r}[name], *args)
            print(name, "EPERM" if r < 0 and ctypes.get_errno() == 1 else "allowed")
    """)
    host = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=30)
    assert host.returncode == 0 and host.stdout.split()[1::2] == ["allowed"] * len(calls), host
    text, r = tool_text(probe + textwrap.dedent("""
        import subprocess, threading
        t = threading.Thread(target=print, args=("thread",))
        t.start(); t.join()
        print(subprocess.run(["echo", "exec"], capture_output=True, text=True).stdout.strip())
    """))
    assert r.ok, text
    lines = text.splitlines()
    assert [ln.split()[1] for ln in lines[:len(calls)]] == ["EPERM"] * len(calls), text
    assert lines[len(calls):] == ["thread", "exec"]


I386_GETPID = """
import ctypes, mmap
page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
page.write(bytes([0xB8, 0x14, 0, 0, 0, 0xCD, 0x80, 0xC3]))  # mov eax, 20 (getpid, i386 ABI); int 0x80; ret
getpid = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))
print("getpid", getpid() == __import__("os").getpid())
"""


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the i386 ABI through int 0x80 is x86-64's")
def test_a_system_call_through_another_abi_kills_the_program():
    """The filter covers the native ABI only; libseccomp's bad-architecture action kills a process that
    goes round it through the i386 ABI (the same code works on the host: the control)."""
    import subprocess
    import sys

    host = subprocess.run([sys.executable, "-c", I386_GETPID], capture_output=True, text=True, timeout=30)
    assert host.stdout == "getpid True\n", host
    text, r = tool_text(I386_GETPID)
    assert r.stdout == "" and r.exit_code == 128 + 31, r  # SIGSYS
    assert text == "error: exit status 159 (killed by SIGSYS)"


# ------------------------------------------------------------------------------ never unconfined


def test_no_bwrap_is_a_one_line_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sandbox, "BWRAP_PATHS", ())
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap") as e:
        run_python("print(1)")
    assert "\n" not in str(e.value)
    with pytest.raises(SandboxUnavailable):  # the tool raises too: the run stops, the code never runs
        execute_tool_call(ToolCall(name="python", arguments={"code": "print(1)"}), [python_tool])


def test_no_seccomp_is_a_one_line_error(monkeypatch):
    def missing():
        raise RuntimeError("Unable to find libseccomp")

    monkeypatch.setattr(sandbox, "filter_bpf", missing)
    with pytest.raises(SandboxUnavailable, match="apt-get install libseccomp2") as e:
        run_python("print(1)")
    assert "\n" not in str(e.value)


def test_a_bwrap_that_cannot_sandbox_stops_the_run(monkeypatch, world_dir):
    fake = world_dir / "bwrap"  # (a root caller starts bwrap as nobody: it must reach the fake)
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{world_dir}:/usr/bin:/bin")
    monkeypatch.setattr(sandbox, "_available", set())
    with pytest.raises(SandboxUnavailable, match="No permissions to create new namespace"):
        run_python("print(1)")
