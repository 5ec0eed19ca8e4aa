"""The method contract: every registered method trains 2 stages on the tiny model, resumes exactly
after a SIGKILL in the middle of a stage, is evaluated by ``satseq eval`` and plotted by
``satseq plot`` — through the real CLI, in subprocesses.

A toy REINFORCE is defined and registered in this file and nowhere else, with its own config
section (``toy.*``, set on the command line and read by its updater); it passes the same contract,
which is the proof that adding a method needs no edit outside the method's own code.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from contract_cli import metric_rows, train_kill_resume
import torch
from pydantic import Field

from satseq.config.section import Section
from satseq.methods.base import Method
from satseq.registry import method_names, register_method
from satseq.update.batch import batch_logprobs, turns_of
from satseq.update.loop import make_optimizer, optimizer_step, policy_temperature, training_mode



# ----------------------------------------------------------------------------- the toy method
class ReinforceUpdater:
    """REINFORCE with the batch-mean baseline (Williams 1992): ``L = −mean_t (r − mean r) log π(y_t)``."""

    def __init__(self, cfg, rt, generator):
        self.pool, self.device = rt.pool, rt.device
        self.agent = rt.pool.names[0]
        self.lr = cfg.toy.lr  # its own section
        self.opt = make_optimizer(rt.pool, self.agent, self.lr, cfg)
        self.temperature, self.grad_clip = policy_temperature(cfg), cfg.trainer.grad_clip

    def update(self, stage, episodes):
        rewards = torch.tensor([ep.turns[-1].reward for ep in episodes])
        adv = rewards - rewards.mean()
        batch = turns_of(episodes, self.agent, adv[:, None])
        model = self.pool.module(self.agent)
        with training_mode(model):
            lp, mask = batch_logprobs(model, batch, self.pool.tokenizer.pad_token_id, temperature=self.temperature,
                                      device=self.device, grad=True, chunk=len(batch))
            loss = -(batch.advantages[:, None] * lp * mask).sum() / mask.sum().clamp(min=1)
            value = optimizer_step(self.opt, loss, self.pool.parameters(self.agent), self.grad_clip)
        return {f"{self.agent}/loss": value, "toy/lr": self.lr}

    def state_dict(self):
        return {"optimizer": self.opt.state_dict()}

    def load_state_dict(self, state):
        self.opt.load_state_dict(state["optimizer"])


class ToyConfig(Section):
    """``toy``: the toy REINFORCE's settings."""

    lr: float = Field(1e-3, gt=0.0, description="learning rate (AdamW)")


@register_method
class ToyReinforce(Method):
    name = "toy_reinforce"
    title = "REINFORCE (toy)"
    config_section = ("toy", ToyConfig)

    def build_updater(self, cfg, rt, generator, prepared):
        return ReinforceUpdater(cfg, rt, generator)


# ----------------------------------------------------------------------------- the contract
FAST = ["trainer.train_batch_size=2", "grpo.group_size=2", "sat_seq.group_size=2", "rollout.max_new_tokens=6",
        "data.train_size=8", "data.eval_size=4", "threads=1", "trainer.tensorboard=false",
        "trainer.progress=false", "trainer.num_stages=2", "trainer.eval_every=2", "ppo.lr=1e-3", "sat_seq.lr=1e-3"]
SPEED = {"apo": ["apo.n_samples=2"],  # settings that only make a method fast enough for a test
         "toy_reinforce": ["toy.lr=2e-3"]}  # the toy's own section, set on the command line
def _in_process(*args):
    from typer.testing import CliRunner

    from satseq.cli import app

    return CliRunner().invoke(app, list(map(str, args)))


_rows = metric_rows


def _weights(run_dir: Path) -> dict:
    from safetensors.torch import load_file

    return {f"{f.parent.name}/{k}": v for f in sorted(run_dir.glob("*_stage_2/*.safetensors"))
            for k, v in load_file(f).items()}


def test_the_toy_method_is_registered_from_this_file_alone():
    assert "toy_reinforce" in method_names()
    assert {"sat_seq", "grpo", "apo", "pag", "mlmt"} <= set(method_names())


def test_the_toy_section_is_mounted_from_this_file_alone(tmp_path):
    from satseq.config import TrainConfig, load_config, save_config
    from satseq.config.docs import render_markdown
    from satseq.errors import ConfigError

    cfg = load_config(None, ["method=toy_reinforce", "toy.lr=0.5"])
    assert cfg.toy.lr == 0.5 and TrainConfig().toy.lr == 1e-3
    save_config(cfg, tmp_path / "c.yaml")
    assert load_config(tmp_path / "c.yaml") == cfg
    with pytest.raises(ConfigError, match=r"^unknown config key 'toy.lrr' \(from override 'toy.lrr=1'\); "
                                          r"did you mean 'toy.lr'\?$"):
        load_config(None, ["method=toy_reinforce", "toy.lrr=1"])
    with pytest.raises(ConfigError, match=r"^config key 'toy.lr': Input should be greater than 0"):
        load_config(None, ["toy.lr=0"])
    assert "`toy.lr`" not in render_markdown()  # docs/configuration.md lists satseq's own methods


def test_every_method_runs_the_base_checks():
    """A key only one method reads (GRPO's presets and DAPO parts), set for another method, is an
    error for every method, those with their own checks included; an estimator of the wrong kind too."""
    from satseq.config import load_config
    from satseq.errors import ConfigError

    for method in method_names():
        for key in ("grpo.dynamic_sampling=true", "grpo.loss=dapo", "grpo.overlong_buffer=4"):
            if method == "grpo":
                load_config(None, [f"method={method}", key])
                continue
            with pytest.raises(ConfigError, match=rf"^config key '{key.split('=')[0]}': only method=grpo reads it "
                                                  rf"\(method={method}\)$"):
                load_config(None, [f"method={method}", key])
        with pytest.raises(ConfigError, match=r"^config key 'grpo.adv_estimator': 'seqaware' is a turn advantage "
                                              r"estimator, this key takes an outcome one \(known: .*grpo"):
            load_config(None, [f"method={method}", "grpo.adv_estimator=seqaware"])
    with pytest.raises(TypeError, match="override check"):
        class _Bad(Method):  # noqa: F841
            name = "bad"

            def validate(self, cfg):
                pass


@pytest.mark.parametrize("method", method_names())
def test_method_contract(method, tiny_dir, tmp_path):
    args = ["train", f"model.path={tiny_dir}", f"method={method}", *FAST, *SPEED.get(method, []),
            f"output_dir={tmp_path}"]
    a, b = train_kill_resume(__file__, args, tmp_path)  # this file runs in the child: the toy method too
    assert len(_rows(a)) == 2 and _rows(a) == _rows(b)
    if method == "toy_reinforce":  # its section's key, from the command line, reached its updater
        assert all(r["toy/lr"] == 2e-3 for r in _rows(a))
    wa, wb = _weights(a), _weights(b)
    assert wa and wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)

    # evaluated and plotted through the same CLI, in this process (the toy method is registered here too)
    ev = _in_process("eval", "--checkpoint_dir", a, "--dataset", "embedded", "--limit", "3", "--output_dir",
                     tmp_path / "ev", "--max_new_tokens", "6", "--threads", "1")
    assert ev.exit_code == 0, ev.output[-2000:]
    from satseq.registry import get_method

    metrics = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert metrics["n_problems"] == 3
    config = (tmp_path / "ev" / "inference_config.yaml").read_text()
    assert f"workflow: {get_method(method).env}" in config

    plot = _in_process("plot", a)
    assert plot.exit_code == 0, plot.output[-2000:]
    assert (a / "dashboard.png").stat().st_size > 10_000
