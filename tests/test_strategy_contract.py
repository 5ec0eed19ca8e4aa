"""The strategy contract: a strategy defined and registered in this file alone is selected with
``trainer.strategy=<name>``, and the loop, the updaters and the checkpoint code go through it: it
trains, is killed (SIGKILL) in the middle of a stage, and resumes exactly — through the real CLI, in
subprocesses, as the method contract does for a toy method.

The toy strategy rolls a stage out in two halves of its problems, each half with the per-episode
sampling streams the whole batch would give it (what ``replicate`` does over two ranks, here in one
process), and records every call the run makes to it; its run must equal the one-process run.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from contract_cli import cli_with, metric_rows, train_kill_resume
from numerics import fp_tol, update_tol

from satseq.registry import register_strategy
from satseq.strategy import Strategy

REPO = Path(__file__).resolve().parents[1]
CALLS = "toy_strategy_calls.jsonl"


@register_strategy
class TwoHalves(Strategy):
    """One process; a stage's problems rolled out in two halves; every call logged to the run dir."""

    name = "toy_two_halves"

    def _log(self, what: str) -> None:
        d = Path(self.cfg.run_dir)
        d.mkdir(parents=True, exist_ok=True)
        with open(d / CALLS, "a") as fh:
            fh.write(json.dumps(what) + "\n")

    def prepare(self, cfg, rt) -> None:
        self._log("prepare")

    def update_weights(self, engine) -> None:
        self._log("update_weights")

    def rollout(self, workflow, problems, pool, engine, *, group_size, generator, gather=True, **options):
        from satseq.rollout.streams import episode_streams
        from satseq.workflows.base import rollout_slice

        self.update_weights(engine)
        self._log("rollout")
        streams = episode_streams(generator, len(problems) * group_size)
        half = len(problems) // 2
        return [ep for lo, hi in ((0, half), (half, len(problems)))
                for ep in rollout_slice(workflow, problems, lo, hi, pool, engine, group_size=group_size,
                                        streams=streams, generator=generator, **options)]

    def logprobs(self, model, batch, compute, **kw):
        self._log("logprobs")
        return super().logprobs(model, batch, compute, **kw)

    def backward(self, loss, params, grad_clip):
        self._log("backward")
        return super().backward(loss, params, grad_clip)

    def export_pool(self, rt):
        self._log("export_pool")
        return super().export_pool(rt)

    def save_trainer_state(self, run_dir, **kw):
        self._log("save_trainer_state")
        return super().save_trainer_state(run_dir, **kw)

    def load_trainer_state(self, run_dir, pool):
        self._log("load_trainer_state")
        return super().load_trainer_state(run_dir, pool)


FAST = ["trainer.train_batch_size=4", "grpo.group_size=2", "data.train_size=8",
        "data.eval_size=4", "threads=1", "trainer.tensorboard=false", "trainer.progress=false",
        "trainer.num_stages=2", "ppo.lr=1e-3", "method=grpo", "reward.custom=tests.reward_fixtures:length_parity",
        "rollout.max_new_tokens=8"]
def _cli(*args, env=None):
    return cli_with(__file__, *args, env=env)  # this file runs in the child: the toy strategy is registered there


_rows = metric_rows


def _weights(run_dir: Path) -> dict:
    return {f"{f.name}/{k}": v for f in sorted(run_dir.glob("*_stage_2.pt")) for k, v in torch.load(f).items()}


def test_a_strategy_registered_in_a_test_file_trains_and_resumes_exactly(tiny_dir, tmp_path):
    args = ["train", f"model.path={tiny_dir}", *FAST, f"output_dir={tmp_path}"]
    toy = [*args, "trainer.strategy=toy_two_halves"]
    local = _cli(*args, "run_name=local")
    assert local.returncode == 0, local.stderr[-2000:]
    a, b = train_kill_resume(__file__, toy, tmp_path)
    one = tmp_path / "local"
    assert len(_rows(a)) == 2 and _rows(a) == _rows(b)  # resumed exactly
    wa, wb, wl = _weights(a), _weights(b), _weights(one)
    assert wa and wa.keys() == wb.keys() == wl.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    # and it trains what one process trains: the same tokens and rewards; the halves are generated in
    # smaller batches, whose kernels may round the logits' last bits differently
    for x, y in zip(_rows(a), _rows(one)):
        assert x.keys() == y.keys()
        assert {k: v for k, v in x.items() if not isinstance(v, float)} == \
            {k: v for k, v in y.items() if not isinstance(v, float)}
        for k in (k for k in x if isinstance(x[k], float)):
            assert x[k] == pytest.approx(y[k], rel=1e-4, abs=fp_tol(y[k])), k
    from safetensors.torch import load_file

    start = load_file(str(tiny_dir / "model.safetensors"))
    moved = max(float((wl[k] - start[k.split("/", 1)[1]]).abs().max()) for k in wl)
    assert max(float((wa[k] - wl[k]).abs().max()) for k in wa) <= update_tol(moved)

    calls = [json.loads(x) for x in (a / CALLS).read_text().splitlines()]
    assert calls[:2] == ["prepare", "load_trainer_state"]  # built, then asked for a state to resume from
    per_stage = {"rollout", "update_weights", "logprobs", "backward", "save_trainer_state"}
    assert per_stage <= set(calls) and calls.count("rollout") == 2 and calls.count("save_trainer_state") == 2
    assert "export_pool" in calls  # the last stage's HF checkpoints
    assert "load_trainer_state" in [json.loads(x) for x in (b / CALLS).read_text().splitlines()]
    assert not (one / CALLS).exists()


def test_an_unknown_strategy_is_a_one_line_error_naming_the_key(tmp_path):
    r = _cli("train", "trainer.strategy=nope", f"output_dir={tmp_path}")
    assert r.returncode != 0
    assert "config key 'trainer.strategy': unknown strategy 'nope'" in r.stderr
    assert "toy_two_halves" in r.stderr and "fsdp2" in r.stderr  # the known ones, the test's own included
    assert not (tmp_path / "sat_seq_dapo").exists()


@pytest.mark.parametrize("name", ["local", "replicate", "fsdp2", "ray"])
def test_every_built_in_strategy_is_one_file_under_scale(name):
    from satseq.registry import get_strategy

    cls = get_strategy(name)
    assert issubclass(cls, Strategy) and cls.name == name
    assert Path(sys.modules[cls.__module__].__file__).parent == REPO / "satseq" / "scale"
