"""Tracker: JSONL lines, truncation on resume, TensorBoard events, missing optional backends."""
from __future__ import annotations

import json
import logging

import pytest

from satseq.tracking import Tracker, read_metrics
from satseq.utils.progress import progress_bar


def test_jsonl_lines(tmp_path):
    with Tracker(tmp_path, tensorboard=False) as tr:
        tr.log({"reward": 0.5, "agent_1/accepted": True, "note": "hi"}, step=0)
        tr.log({"reward": 0.75, "count": 3}, step=1)
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x) for x in lines] == [
        {"step": 0, "reward": 0.5, "agent_1/accepted": True, "note": "hi"},
        {"step": 1, "reward": 0.75, "count": 3},
    ]
    assert read_metrics(tmp_path)[1]["count"] == 3


def test_numpy_and_torch_scalars(tmp_path):
    torch = pytest.importorskip("torch")
    tr = Tracker(tmp_path, tensorboard=False)
    tr.log({"loss": torch.tensor(1.5)}, step=2)
    tr.close()
    assert read_metrics(tmp_path) == [{"step": 2, "loss": 1.5}]


def test_read_metrics_missing_and_torn_line(tmp_path):
    assert read_metrics(tmp_path) == []
    (tmp_path / "metrics.jsonl").write_text('{"step": 0, "a": 1}\n{"step": 1, "a"')
    assert read_metrics(tmp_path) == [{"step": 0, "a": 1}]


def test_truncate_on_resume(tmp_path):
    tr = Tracker(tmp_path, tensorboard=False)
    for s in range(5):
        tr.log({"x": s}, step=s)
    tr.close()
    # A killed run may also leave a torn last line.
    with open(tmp_path / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 5, "x"')
    tr = Tracker(tmp_path, tensorboard=False, resume_step=3)
    assert [r["step"] for r in read_metrics(tmp_path)] == [0, 1, 2]
    for s in range(3, 6):
        tr.log({"x": s}, step=s)
    tr.close()
    assert [r["step"] for r in read_metrics(tmp_path)] == [0, 1, 2, 3, 4, 5]
    # Resuming from 0 starts over.
    Tracker(tmp_path, tensorboard=False, resume_step=0).close()
    assert read_metrics(tmp_path) == []


def test_tensorboard_event_file(tmp_path):
    pytest.importorskip("tensorboard")
    pytest.importorskip("torch")
    tr = Tracker(tmp_path, tensorboard=True, config={"a": 1})
    tr.log({"reward/mean": 0.25, "text": "ignored"}, step=0)
    tr.log({"reward/mean": 0.5}, step=1)
    tr.close()
    events = list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("reward/mean")] == [(0, 0.25), (1, 0.5)]


def test_tensorboard_disabled_writes_nothing(tmp_path):
    Tracker(tmp_path, tensorboard=False).log({"a": 1}, step=0)
    assert not (tmp_path / "tensorboard").exists()


def test_enabled_but_missing_backends_warn_once(tmp_path, monkeypatch, caplog):
    import builtins

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name in ("wandb", "mlflow"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with caplog.at_level(logging.WARNING, logger="satseq.tracking"):
        tr = Tracker(tmp_path, tensorboard=False, wandb=True, mlflow=True)
        tr.log({"a": 1.0}, step=0)
        tr.log({"a": 2.0}, step=1)
        tr.close()
    msgs = [r.getMessage() for r in caplog.records]
    assert sum("wandb" in m for m in msgs) == 1
    assert sum("mlflow" in m for m in msgs) == 1
    assert all("\n" not in m for m in msgs)
    assert len(read_metrics(tmp_path)) == 2


def test_progress_bar_silent_when_not_tty(capsys):
    with progress_bar(5, "train") as bar:
        for _ in range(5):
            bar.set_postfix("reward 0.5")
            bar.advance()
    assert bar.completed == 5
    with progress_bar(3, "eval", enabled=False) as bar:
        bar.advance(3, extra=1)
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""
