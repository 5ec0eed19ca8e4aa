"""``python -m satseq.cli ARGS`` and ``python -c CODE ARGS`` as real child processes that start warm.

A fresh interpreter spends about 5 s of CPU importing torch, transformers and peft before satseq's code
runs, and the end-to-end tests start about a hundred of them. :func:`run` forks them instead from one
server per test process. The server imported those libraries once and has run nothing since: no torch
operation (so no OpenMP pool), no tokenizer, no second Python thread (it checks, and the suite falls
back to ordinary subprocesses if it finds one; the one native thread, OpenBLAS's pool started by numpy,
shuts down and restarts across a fork by OpenBLAS's own ``pthread_atfork`` handlers). The child is a separate process with its own pid, exit status,
stdout and stderr, working directory and environment; a SIGKILL ends it as it ends a fresh one, and it
runs its atexit handlers on the way out. :func:`run` has ``subprocess.run``'s signature and result.

What a fork does not give, and where the suite therefore still starts fresh interpreters:

- settings read when a library is imported: a request whose environment differs from the server's in
  anything but ``SATSEQ_*`` and ``PYTEST_*`` variables and ``OMP_NUM_THREADS`` (applied with
  ``torch.set_num_threads``, as torch applies it at start) runs as an ordinary subprocess;
- a fresh string-hash seed: forks share the server's, so two forks iterate a set of strings in the same
  order. The launches that stay fresh (torchrun, Ray, vLLM's SIGKILL test, the tutorials, and any
  command this module does not recognise) still run under independent seeds;
- the CLI's own start-up (``satseq --help`` in a new interpreter): tests/test_tutorials.py runs the
  pages' commands through the installed ``satseq`` script.

When a test changes this process's environment after the server started (some code under test sets
variables), the next request starts a new server with it. ``SATSEQ_TEST_FORK=0`` turns the server off (every call is an ordinary subprocess). docs/testing.md.
"""
from __future__ import annotations

import atexit
import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# variables read when a command runs, not when a library is imported (PYTEST_*: pytest's own bookkeeping)
RUNTIME_ENV = ("SATSEQ_", "PYTEST_", "OMP_NUM_THREADS")
PRELOAD = ("satseq.cli", "satseq.loop", "satseq.eval.runner", "satseq.compare.cli", "transformers", "peft",
           "transformers.models.qwen2.modeling_qwen2", "safetensors.torch", "matplotlib.pyplot", "pytest")

SERVER = r"""
import importlib, json, os, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
proto = os.fdopen(os.dup(1), "w")
requests = os.fdopen(os.dup(0), "r")
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 0); os.dup2(null, 1)
import threading
threads = threading.active_count()
proto.write(json.dumps({"ready": threads == 1, "threads": threads}) + "\n"); proto.flush()


def child(req):
    code = 1
    try:
        proto.close(); requests.close()
        for fd, path in ((1, req["stdout"]), (2, req["stderr"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
        os.chdir(req["cwd"])
        os.environ.clear(); os.environ.update(req["env"])
        if "OMP_NUM_THREADS" in req["env"]:
            import torch
            torch.set_num_threads(int(req["env"]["OMP_NUM_THREADS"]))
        import runpy, traceback
        try:
            if req["module"]:
                sys.argv = [req["module"], *req["args"]]
                sys.modules.pop(req["module"], None)  # as in a fresh `python -m`: __main__ is its only copy yet
                runpy.run_module(req["module"], run_name="__main__", alter_sys=True)
            else:
                sys.argv = ["-c", *req["args"]]
                exec(compile(req["code"], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
            code = 0
        except SystemExit as e:
            if e.code is None or isinstance(e.code, int):
                code = e.code or 0
            else:
                print(e.code, file=sys.stderr); code = 1
        except BaseException:
            traceback.print_exc(); code = 1
        import atexit
        atexit._run_exitfuncs()
        sys.stdout.flush(); sys.stderr.flush()
    finally:
        os._exit(code)


for line in requests:
    req = json.loads(line)
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        child(req)
    proto.write(json.dumps({"pid": pid}) + "\n"); proto.flush()
    _, status = os.waitpid(pid, 0)
    proto.write(json.dumps({"rc": os.waitstatus_to_exitcode(status)}) + "\n"); proto.flush()
"""


class _Server:
    def __init__(self):
        env = dict(os.environ)
        self.env = env
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER, *PRELOAD], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env, cwd=Path(__file__).parents[1])
        hello = json.loads(self.proc.stdout.readline() or '{"ready": false}')
        self.ready = bool(hello.get("ready"))
        atexit.register(self.close)

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def accepts(self, env: dict) -> bool:
        return self.ready and self.proc.poll() is None and _same_at_import(env, self.env)

    def run(self, cmd, req, timeout):
        with tempfile.TemporaryDirectory(prefix="warm_cli_") as d:
            req = dict(req, stdout=os.path.join(d, "out"), stderr=os.path.join(d, "err"))
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            pid = json.loads(self.proc.stdout.readline())["pid"]
            sel = selectors.DefaultSelector()
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            deadline = None if timeout is None else time.monotonic() + timeout
            timed_out = False
            while True:
                wait = None if deadline is None else max(0.0, deadline - time.monotonic())
                if sel.select(wait):
                    break
                os.kill(pid, 9)
                timed_out, deadline = True, None  # then wait for the server to reap it
            rc = json.loads(self.proc.stdout.readline())["rc"]
            sel.close()
            out, err = (Path(req[k]).read_text(errors="replace") for k in ("stdout", "stderr"))
        if timed_out:
            raise subprocess.TimeoutExpired(cmd, timeout, output=out, stderr=err)
        return subprocess.CompletedProcess(cmd, rc, out, err)


_server: _Server | None = None


def _same_at_import(a: dict, b: dict) -> bool:
    """The two environments agree on everything a library may read when it is imported."""
    return all(a.get(k) == b.get(k) for k in set(a) | set(b) if not k.startswith(RUNTIME_ENV))


def _warm_request(cmd, cwd) -> dict | None:
    """The fork request for ``cmd`` if it is ``python -m satseq.cli ...`` or ``python -c CODE ...``."""
    if len(cmd) < 2 or cmd[0] != sys.executable:
        return None
    cwd = str(cwd or os.getcwd())
    if cmd[1] == "-m" and len(cmd) > 2 and cmd[2] == "satseq.cli":
        return {"module": "satseq.cli", "code": None, "args": [str(a) for a in cmd[3:]], "cwd": cwd}
    if cmd[1] == "-c" and len(cmd) > 2:
        return {"module": None, "code": cmd[2], "args": [str(a) for a in cmd[3:]], "cwd": cwd}
    return None


def run(cmd, *, env=None, cwd=None, timeout=None, capture_output=True, text=True):
    """``subprocess.run(cmd, capture_output=True, text=True, ...)``, forked from the warm server when it can."""
    global _server
    assert capture_output and text, "warm_cli.run captures text output, as the tests use it"
    cmd = [str(c) for c in cmd]
    env = dict(os.environ if env is None else env)
    req = _warm_request(cmd, cwd) if os.environ.get("SATSEQ_TEST_FORK", "1") != "0" else None
    if req is not None:
        if _server is not None and not _server.accepts(env) and _same_at_import(env, dict(os.environ)):
            _server.close()  # this process's environment changed since the server started: start it again
            _server = None
        if _server is None:
            _server = _Server()
        if _server.accepts(env):
            return _server.run(cmd, dict(req, env=env), timeout)
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
