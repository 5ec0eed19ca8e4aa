"""What the contract tests share (tests/test_method_contract.py, tests/test_strategy_contract.py): the
real CLI in a child process that first executes the test file, so that what the file registers (a toy
method, a toy strategy) is registered in the child too; and a run's metrics without its timings."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import warm_cli

REPO = Path(__file__).resolve().parents[1]
DRIVER = ("import importlib.util, os, sys; sys.path.insert(0, os.path.dirname(sys.argv[1])); "
          "s = importlib.util.spec_from_file_location('contract', sys.argv[1]); "
          "m = importlib.util.module_from_spec(s); s.loader.exec_module(m); "
          "from satseq.cli import main; sys.argv = ['satseq'] + sys.argv[2:]; main()")


def cli_with(test_file: str, *args, env=None):
    """``satseq ARGS`` in a child that has executed ``test_file`` first (forked warm: tests/warm_cli.py)."""
    return warm_cli.run([sys.executable, "-c", DRIVER, test_file, *map(str, args)], cwd=REPO,
                        env=dict(os.environ, **(env or {})), timeout=600)


def metric_rows(run_dir: Path) -> list[dict]:
    """metrics.jsonl's rows without the wall-clock keys (what must repeat exactly)."""
    rows = [json.loads(x) for x in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/") and k not in ("time", "wall_time")} for r in rows]


def train_kill_resume(test_file: str, args: list, out: Path) -> tuple[Path, Path]:
    """The contract's runs of ``satseq ARGS``: ``run_name=whole``, then ``run_name=resumed`` SIGKILLed in the
    middle of stage 1 and run again, which must say it resumes. Returns the two run directories."""
    whole = cli_with(test_file, *args, "run_name=whole")
    assert whole.returncode == 0, whole.stderr[-2000:]
    killed = cli_with(test_file, *args, "run_name=resumed", env={"SATSEQ_KILL_AT_STAGE": "1"})
    assert killed.returncode == -9, killed.stderr[-2000:]
    resumed = cli_with(test_file, *args, "run_name=resumed")
    assert resumed.returncode == 0 and "resuming" in resumed.stdout + resumed.stderr, resumed.stderr[-2000:]
    return Path(out) / "whole", Path(out) / "resumed"
