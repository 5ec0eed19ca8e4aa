"""tests/warm_cli.py: a forked command behaves as the same command in a fresh interpreter (exit status,
output, working directory, environment, SIGKILL, timeout), and a request it cannot fork faithfully runs
fresh."""
import os
import subprocess
import sys

import pytest
import warm_cli

PROBE = ("import os, sys; print('argv', sys.argv[1:]); print('cwd', os.getcwd()); "
         "print('env', os.environ.get('SATSEQ_PROBE')); print('parent', os.getppid()); "
         "print('to stderr', file=sys.stderr); sys.exit(int(sys.argv[1]))")


def _fields(out: str) -> dict:
    return dict(line.split(" ", 1) for line in out.splitlines())


@pytest.mark.parametrize("code", [0, 3])
def test_a_forked_command_gives_what_a_fresh_one_gives(tmp_path, code):
    cmd = [sys.executable, "-c", PROBE, str(code), "x y"]
    env = dict(os.environ, SATSEQ_PROBE="on")
    warm = warm_cli.run(cmd, env=env, cwd=tmp_path, timeout=60)
    fresh = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert warm.returncode == fresh.returncode == code
    assert warm.stderr == fresh.stderr == "to stderr\n"
    w, f = _fields(warm.stdout), _fields(fresh.stdout)
    assert w.pop("parent") != f.pop("parent") == str(os.getpid())  # forked from the server, not from here
    assert w == f == {"argv": f"['{code}', 'x y']", "cwd": str(tmp_path), "env": "on"}


def test_the_cli_module_runs_as_python_dash_m(tmp_path):
    r = warm_cli.run([sys.executable, "-m", "satseq.cli", "train", "no_such_key=1", f"output_dir={tmp_path}"],
                     timeout=120)
    assert r.returncode == 2 and r.stderr.startswith("error:") and "no_such_key" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "RuntimeWarning" not in r.stderr


def test_sigkill_and_timeout_end_the_child_as_they_end_a_fresh_one():
    killed = warm_cli.run([sys.executable, "-c", "import os; os.kill(os.getpid(), 9)"], timeout=60)
    assert killed.returncode == -9
    with pytest.raises(subprocess.TimeoutExpired):
        warm_cli.run([sys.executable, "-c", "import time; time.sleep(60)"], timeout=1)


def test_an_environment_read_at_import_runs_fresh():
    env = dict(os.environ, HF_HUB_OFFLINE="0" if os.environ.get("HF_HUB_OFFLINE") == "1" else "1")
    r = warm_cli.run([sys.executable, "-c", PROBE, "0"], env=env, timeout=60)
    assert r.returncode == 0 and _fields(r.stdout)["parent"] == str(os.getpid())


def test_a_server_started_before_the_environment_changed_is_started_again(monkeypatch):
    warm_cli.run([sys.executable, "-c", "pass"], timeout=60)
    monkeypatch.setenv("SATSEQ_WARM_CLI_DRIFT_PROBE_LIB", "1")
    monkeypatch.setenv("WARM_CLI_DRIFT_PROBE", "1")  # read at import, for all the server knows
    r = warm_cli.run([sys.executable, "-c", PROBE, "0"], timeout=60)
    assert r.returncode == 0 and _fields(r.stdout)["parent"] != str(os.getpid())  # forked, by a new server
