"""One process trains a run directory at a time, and ``satseq compare``'s workers end with it.

Found when a study was restarted after ``kill``ing its ``satseq compare``: a worker of the first, orphaned,
went on training into the run directory the second one trained, and both appended stages to one
``metrics.jsonl`` (steps 3, 0, 4, 5, 1, ...) and overwrote each other's checkpoints.
"""
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import warm_cli

from satseq.checkpoint import sole_trainer
from test_train_e2e import FAST


def test_a_second_trainer_of_a_run_directory_stops_before_writing(tiny_dir, tmp_path):
    run = tmp_path / "out" / "r"
    args = [f"model.path={tiny_dir}", "method=grpo", "trainer.num_stages=1", *FAST, f"output_dir={tmp_path}/out",
            "run_name=r"]
    with sole_trainer(run):  # the first trainer (this process) holds it
        r = warm_cli.run([sys.executable, "-m", "satseq.cli", "train", *args], env=dict(os.environ), timeout=300)
        assert r.returncode != 0
        err = r.stderr.strip().splitlines()
        assert len(err) == 1 and "being trained by another process" in err[0] and str(run) in err[0], r.stderr
        assert sorted(p.name for p in run.iterdir()) == []  # nothing written: no config, metrics or checkpoint
    r = warm_cli.run([sys.executable, "-m", "satseq.cli", "train", *args], env=dict(os.environ), timeout=300)
    assert r.returncode == 0, r.stderr  # released with the first: the run trains
    assert (run / "metrics.jsonl").read_text().count("\n") == 1


def test_the_lock_is_held_only_while_training(tmp_path):
    with sole_trainer(tmp_path / "r"):
        with pytest.raises(Exception, match="being trained by another process"):
            with sole_trainer(tmp_path / "r"):  # a second open description of the directory: refused
                pass
    with sole_trainer(tmp_path / "r"):
        pass


PARENT = textwrap.dedent("""
    import multiprocessing, os, signal, sys, time
    from concurrent.futures import ProcessPoolExecutor
    from satseq.utils.children import end_with_parent

    def job(path):
        open(path, "w").write(str(os.getpid()))
        time.sleep(120)

    if __name__ == "__main__":
        watch = sys.argv[2] == "watch"
        pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                   **({"initializer": end_with_parent, "initargs": (os.getpid(), 0.1)} if watch else {}))
        pool.submit(job, sys.argv[1])
        while not os.path.exists(sys.argv[1]) or not open(sys.argv[1]).read():
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGKILL)  # the parent dies as `kill -9` or the OOM killer would end it
""")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"  # a zombie has exited (re-parented to an init that may not reap it)


@pytest.mark.parametrize("watch", [True, False])
def test_a_worker_ends_with_its_killed_parent(tmp_path, watch):
    script, pid_file = tmp_path / "parent.py", tmp_path / "worker.pid"
    script.write_text(PARENT)
    subprocess.run([sys.executable, str(script), str(pid_file), "watch" if watch else "no"], timeout=120)
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        assert _alive(pid) is not watch  # without the watch the orphan trains on (the bug this prevents)
    finally:
        if _alive(pid):
            os.kill(pid, 9)
