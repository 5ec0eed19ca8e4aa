"""The Python API (``satseq.train`` / ``satseq.evaluate``) and the seed's reward hook wired into
training: a ``RealController`` subclass named in the config gives the rewards ``reward.custom`` gives."""
from __future__ import annotations

import json

import pytest

import satseq
from satseq.errors import ConfigError

FAST = {"trainer.train_batch_size": 2, "sat_seq.group_size": 2, "grpo.group_size": 2, "rollout.max_new_tokens": 6,
        "data.train_size": 8, "data.eval_size": 4, "threads": 1, "trainer.tensorboard": False,
        "trainer.progress": False, "trainer.num_stages": 1}
QUIET = dict(console=lambda *a: None)

HOOKS = '''
from satseq.methods.sat_seq.real_controller import RealController


def parity(prompt, response, answer):
    return float(len(response) % 2) + 0.25


class ParityController(RealController):
    def _compute_reward(self, prompt, response, answer):
        return parity(prompt, response, answer)
'''


def _episode_rewards(result) -> list:
    return [r["rollout/episode_reward"] for r in result.metrics]


def test_train_returns_the_run_and_accepts_dotted_and_keyword_overrides(tiny_dir, tmp_path):
    r = satseq.train(overrides={**FAST, "model.path": str(tiny_dir), "output_dir": str(tmp_path)},
                     method="grpo", trainer__num_stages=2, **QUIET)
    assert r.run_dir == tmp_path / "grpo" and r.config.trainer.num_stages == 2 and r.config.method == "grpo"
    assert len(r.metrics) == 2 and r.final["step"] == 1 and "policy/accuracy" in r.final
    m = satseq.evaluate(r.run_dir, dataset="embedded", limit=2, max_new_tokens=4, output_dir=tmp_path / "ev",
                        console=lambda *a: None)
    assert m["n_problems"] == 2 and json.loads((tmp_path / "ev" / "metrics.json").read_text())["n_problems"] == 2


def test_train_from_a_dict_and_from_a_config(tiny_dir, tmp_path):
    cfg = satseq.load({"method": "grpo", "trainer": {"num_stages": 1}},
                      {**FAST, "model.path": str(tiny_dir), "output_dir": str(tmp_path), "run_name": "d"})
    assert cfg.run_name == "d" and cfg.method == "grpo"
    again = satseq.load(cfg, run_name="e")
    assert again.run_name == "e" and again.trainer == cfg.trainer
    with pytest.raises(ConfigError, match="unknown config key 'trainer.nope'"):
        satseq.load(None, trainer__nope=1)


def test_reward_controller_subclass_changes_rewards_exactly_as_reward_custom(tiny_dir, tmp_path):
    (tmp_path / "hooks.py").write_text(HOOKS)
    base = {**FAST, "model.path": str(tiny_dir), "trainer.num_stages": 2}
    default = satseq.train(overrides={**base, "output_dir": str(tmp_path / "a")}, **QUIET)
    custom = satseq.train(overrides={**base, "output_dir": str(tmp_path / "b"),
                                     "reward.custom": f"{tmp_path}/hooks.py:parity"}, **QUIET)
    controller = satseq.train(overrides={**base, "output_dir": str(tmp_path / "c"),
                                         "reward.controller": f"{tmp_path}/hooks.py:ParityController"}, **QUIET)
    assert _episode_rewards(controller) == _episode_rewards(custom)
    assert _episode_rewards(controller) != _episode_rewards(default)


def test_reward_controller_errors_are_one_line(tiny_dir, tmp_path):
    (tmp_path / "hooks.py").write_text("class NoHook:\n    pass\n")
    with pytest.raises(ConfigError, match=r"reward.controller: .*has no _compute_reward"):
        satseq.train(overrides={**FAST, "model.path": str(tiny_dir), "output_dir": str(tmp_path),
                                "reward.controller": f"{tmp_path}/hooks.py:NoHook"}, **QUIET)
    with pytest.raises(ConfigError, match=r"config key 'reward.controller': not supported with method=pag"):
        (tmp_path / "h2.py").write_text(HOOKS)
        satseq.train(overrides={**FAST, "model.path": str(tiny_dir), "output_dir": str(tmp_path), "method": "pag",
                                "reward.controller": f"{tmp_path}/h2.py:ParityController"}, **QUIET)


def test_a_registered_loss_is_reachable_from_the_config(tiny_dir, tmp_path):
    """gspo (and any loss registered with the clipped-PG signature) trains GRPO when named in YAML."""
    # two mini-batches per stage: the second is off-policy, where the two losses differ (on-policy,
    # at ratio 1, GSPO's gradient equals GRPO's)
    base = {**FAST, "model.path": str(tiny_dir), "method": "grpo", "ppo.lr": 1e-3, "trainer.num_stages": 3,
            "ppo.mini_batch_size": 2}
    parity = lambda prompt, response, answer: float(len(response) % 2)  # noqa: E731  (a reward with signal)
    ppo = satseq.train(overrides={**base, "output_dir": str(tmp_path / "ppo")}, reward_fn=parity, **QUIET)
    gspo = satseq.train(overrides={**base, "output_dir": str(tmp_path / "gspo"), "ppo.policy_loss": "gspo"},
                        reward_fn=parity, **QUIET)
    assert gspo.config.ppo.policy_loss == "gspo"
    assert ppo.metrics[0]["rollout/episode_reward"] == gspo.metrics[0]["rollout/episode_reward"]  # same rollout
    # the off-policy mini-batch (a stage whose groups all got one reward has zero advantages: loss 0 in both)
    assert any(p["policy/loss"] != g["policy/loss"] for p, g in zip(ppo.metrics, gspo.metrics))
