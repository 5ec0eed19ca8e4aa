"""bench/update/vs_trl.py: both frameworks' configs come from one settings object and agree; without TRL
the bench stops with one line naming the extra to install. No run is timed here."""
from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("vs_trl_bench_under_test", ROOT / "bench" / "update" / "vs_trl.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.modules.pop(spec.name, None)


def _derived(bench, s, seed=0):
    return (bench.satseq_overrides(s, seed=seed, output_dir="o", run_name="r"),
            bench.trl_config(s, seed=seed, output_dir="o"), bench.lora_kwargs(s))


@pytest.mark.parametrize("case", ["tiny", "smollm2"])
def test_both_configs_derive_from_one_settings_object_and_agree(bench, case):
    s = bench.case_settings(case, "/some/model", steps=5)
    sat, trl, lora = _derived(bench, s, seed=3)
    rows = bench.agreement(sat, trl, lora)
    assert [name for name, a, b in rows if a != b] == []
    per_step = s.prompts_per_step * s.group_size
    assert sat["trainer.train_batch_size"] == s.prompts_per_step
    assert trl["per_device_train_batch_size"] * trl["gradient_accumulation_steps"] * trl["steps_per_generation"] == per_step
    assert sat["grpo.group_size"] == trl["num_generations"] == s.group_size
    assert sat["rollout.max_new_tokens"] == trl["max_completion_length"] == s.max_new_tokens
    assert sat["ppo.lr"] == trl["learning_rate"] == s.lr and trl["lr_scheduler_type"] == "constant"
    assert sat["ppo.mini_batch_size"] >= per_step and sat["ppo.ppo_epochs"] == 1 and trl["num_iterations"] == 1
    assert sat["ppo.kl_coef"] == trl["beta"] == 0.0
    assert sat["seed"] == trl["seed"] == 3 and sat["trainer.num_stages"] == trl["max_steps"] == 5
    if case == "smollm2":
        assert sat["model.lora.enabled"] and lora is not None
        assert sat["model.lora.r"] == lora["r"] == 16 and sat["model.lora.alpha"] == lora["lora_alpha"]
        assert sat["model.lora.target_modules"] == lora["target_modules"] == ["q_proj", "k_proj", "v_proj", "o_proj"]
        assert sat["rollout.stop"] == ["\n"]
    else:
        assert not sat["model.lora.enabled"] and lora is None


def test_a_changed_setting_reaches_both_configs(bench):
    s = dataclasses.replace(bench.case_settings("smollm2", "/m"), prompts_per_step=3, group_size=6, lr=7e-4,
                            max_new_tokens=17, lora={"r": 4, "alpha": 8, "dropout": 0.1, "target_modules": ["q_proj"]})
    sat, trl, lora = _derived(bench, s)
    assert [name for name, a, b in bench.agreement(sat, trl, lora) if a != b] == []
    assert (sat["trainer.train_batch_size"], sat["grpo.group_size"], trl["per_device_train_batch_size"]) == (3, 6, 18)
    assert (sat["ppo.lr"], trl["learning_rate"], trl["max_completion_length"]) == (7e-4, 7e-4, 17)
    assert (sat["model.lora.r"], lora["r"], lora["lora_dropout"], lora["target_modules"]) == (4, 4, 0.1, ["q_proj"])


@pytest.mark.parametrize("key,value,row", [("num_generations", 8, "samples per prompt (group)"),
                                           ("learning_rate", 1e-3, "learning rate (constant)"),
                                           ("lr_scheduler_type", "linear", "learning rate (constant)"),
                                           ("num_iterations", 2, "optimizer steps per step"),
                                           ("beta", 0.04, "KL coefficient"),
                                           ("loss_type", "dapo", "loss aggregation")])
def test_agreement_reports_a_mismatch(bench, key, value, row):
    sat, trl, lora = _derived(bench, bench.case_settings("tiny", "/m"))
    trl[key] = value
    assert row in [name for name, a, b in bench.agreement(sat, trl, lora) if a != b]


def test_satseq_overrides_validate_as_an_on_policy_grpo_config(bench, tmp_path):
    from satseq.api import load
    from satseq.update.clipped_pg import PGSettings, is_on_policy

    s = bench.case_settings("smollm2", str(tmp_path))
    cfg = load(None, bench.satseq_overrides(s, seed=0, output_dir=str(tmp_path), run_name="x"))
    assert cfg.method == "grpo" and cfg.trainer.train_batch_size == 8 and cfg.grpo.group_size == 4
    assert cfg.model.lora.enabled is True and cfg.model.lora.r == 16 and cfg.rollout.stop == ["\n"]
    assert is_on_policy(PGSettings.from_config(cfg), s.prompts_per_step * s.group_size)


def test_trl_accepts_the_derived_config(bench, tmp_path):
    pytest.importorskip("trl")
    from peft import LoraConfig
    from trl import GRPOConfig

    s = bench.case_settings("smollm2", "/m")
    args = GRPOConfig(**bench.trl_config(s, seed=0, output_dir=str(tmp_path)))
    assert args.generation_batch_size == s.prompts_per_step * s.group_size and args.steps_per_generation == 1
    assert args.num_generations == s.group_size and args.max_completion_length == s.max_new_tokens
    assert args.gradient_checkpointing is False and args.beta == 0.0
    lc = LoraConfig(**bench.lora_kwargs(s))
    assert (lc.r, lc.lora_alpha, lc.lora_dropout, sorted(lc.target_modules)) == (16, 32, 0.0, ["k_proj", "o_proj", "q_proj", "v_proj"])


def test_without_trl_the_bench_stops_with_one_line(bench, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "trl", None)  # import trl -> ImportError
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        bench.main(["--case", "tiny", "--out", str(out)])
    msg = str(e.value.code)
    assert msg == bench.MISSING_TRL and "\n" not in msg and "pip install 'satseq[bench]'" in msg
    assert not out.exists()  # stopped before any work
