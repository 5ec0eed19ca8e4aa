"""rollout.engine=auto / rollout.dtype=auto / rollout.decode_gemm=auto (satseq.rollout.choice): the rule, the
cache, the record in run_info.json, and a resumed run that keeps its choice whatever a new measurement would say."""
from __future__ import annotations

import json

import pytest

import satseq.rollout.choice as choice_mod
from satseq.config import load_config
from satseq.rollout.choice import MARGIN, bf16_matmul_slowdown, choose, default_choice
from satseq.update.engine_correction import EngineCorrection

SMALL = ["method=grpo", "trainer.train_batch_size=2", "grpo.group_size=2", "rollout.max_new_tokens=6",
         "data.train_size=16", "data.eval_size=4", "trainer.progress=false", "trainer.tensorboard=false",
         "trainer.export_pt=false"]


@pytest.fixture
def calibrating(tmp_path, monkeypatch):
    monkeypatch.setenv("SATSEQ_ROLLOUT_CALIBRATION", "on")
    monkeypatch.setenv("SATSEQ_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(choice_mod, "bf16_matmul_slowdown", lambda model, device: 1.0)  # no screen: the fakes decide
    # engine and dtype only (the build's default GEMM kernel); the kernel's own choice is tested below
    monkeypatch.setattr(choice_mod, "_gemms", lambda cfg, engine, dtype, device: ["auto"])


def _speeds(table):
    calls = []

    def fake(engine, dtype, model, tokenizer, device, cfg, gemm="auto"):
        calls.append((engine, dtype) if gemm == "auto" else (engine, dtype, gemm))
        return table[choice_mod._name(engine, dtype, gemm)]
    return fake, calls


def test_bf16_is_chosen_only_when_it_beats_fp32_by_the_margin(tiny, calibrating, tmp_path):
    model, tok = tiny
    cfg = load_config(None, [f"output_dir={tmp_path}"])
    for bf16, want in ((0.99 * MARGIN * 100, "float32"), (1.01 * MARGIN * 100, "bfloat16")):
        (tmp_path / "cache" / "rollout_choice.json").unlink(missing_ok=True)
        fake, calls = _speeds({"hf/float32": 100.0, "hf/bfloat16": bf16})
        got = choose(cfg, model, tok, "cpu", measure_fn=fake)
        assert (got.engine, got.dtype, got.source) == ("hf", want, "measured")
        assert sorted(calls) == [("hf", "bfloat16"), ("hf", "float32")]  # vllm is not installed here
    fake, calls = _speeds({"hf/float32": 1.0, "hf/bfloat16": 1.0})
    again = choose(cfg, model, tok, "cpu", measure_fn=fake)  # same machine and model: the cache, no measurement
    assert (again.dtype, again.source, calls) == ("bfloat16", "cached", [])


def test_named_settings_are_kept_and_a_failing_candidate_is_skipped(tiny, calibrating, tmp_path):
    model, tok = tiny
    fixed = load_config(None, [f"output_dir={tmp_path}", "rollout.engine=hf", "rollout.dtype=float32"])
    assert choose(fixed, model, tok, "cpu", measure_fn=None).source == "fixed"

    def broken_bf16(engine, dtype, *a):
        if dtype == "bfloat16":
            raise RuntimeError("no bf16 kernels here")
        return 50.0
    cfg = load_config(None, [f"output_dir={tmp_path}"])
    got = choose(cfg, model, tok, "cpu", measure_fn=broken_bf16)
    assert (got.dtype, got.speeds["hf/bfloat16"]) == ("float32", 0.0)
    bf16_model = load_config(None, [f"output_dir={tmp_path}", "model.dtype=bfloat16"])
    fake, calls = _speeds({"hf/bfloat16": 10.0})
    assert choose(bf16_model, model, tok, "cpu", measure_fn=fake).dtype == "bfloat16" and calls == [("hf", "bfloat16")]


def test_calibration_off_is_the_choice_before_auto_existed(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("SATSEQ_ROLLOUT_CALIBRATION", "off")
    model, tok = tiny
    cfg = load_config(None, [f"output_dir={tmp_path}"])
    got = choose(cfg, model, tok, "cpu", measure_fn=lambda *a: pytest.fail("measured with the calibration off"))
    assert (got.engine, got.dtype, got.source) == ("hf", "float32", "default") == (
        default_choice(cfg).engine, default_choice(cfg).dtype, default_choice(cfg).source)


def test_a_bf16_rollout_of_an_fp32_trainer_is_corrected(tmp_path):
    assert EngineCorrection.from_config(load_config(None, [])).level == "off"
    assert EngineCorrection.from_config(load_config(None, ["rollout.dtype=bfloat16"])).level == "token"
    assert EngineCorrection.from_config(load_config(None, ["rollout.dtype=bfloat16", "model.dtype=bfloat16"])).level == "off"
    assert EngineCorrection.from_config(load_config(None, ["rollout.dtype=bfloat16", "rollout.is_correction=off"])).level == "off"


def test_the_choice_is_recorded_and_a_resumed_run_keeps_it(tiny_dir, calibrating, tmp_path, monkeypatch):
    from satseq.loop import train

    base = [f"model.path={tiny_dir}", f"output_dir={tmp_path}", "run_name=auto", "trainer.save_every=1", *SMALL]
    fake, calls = _speeds({"hf/float32": 100.0, "hf/bfloat16": 300.0})
    monkeypatch.setattr(choice_mod, "measure", fake)
    lines = []
    train(load_config(None, base + ["trainer.num_stages=1"]), console=lambda *a, **k: lines.append(" ".join(map(str, a))))
    run = tmp_path / "auto"
    rec = json.loads((run / "run_info.json").read_text())["rollout"]
    assert (rec["engine"], rec["dtype"], rec["source"]) == ("hf", "bfloat16", "measured")
    assert rec["speeds"] == {"hf/float32": 100.0, "hf/bfloat16": 300.0}
    assert any("rollout: hf in bfloat16 (measured" in ln for ln in lines)
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert "policy/is_engine_mean" in rows[0] and rows[0]["policy/logprob_gap"] > 0  # bf16 rollout: corrected

    # another machine (or a new measurement) would now choose fp32; the resumed run keeps bf16
    (tmp_path / "cache" / "rollout_choice.json").unlink()
    fake2, calls2 = _speeds({"hf/float32": 300.0, "hf/bfloat16": 100.0})
    monkeypatch.setattr(choice_mod, "measure", fake2)
    lines.clear()
    train(load_config(None, base + ["trainer.num_stages=2"]), console=lambda *a, **k: lines.append(" ".join(map(str, a))))
    assert calls2 == []
    rec2 = json.loads((run / "run_info.json").read_text())["rollout"]
    assert (rec2["engine"], rec2["dtype"], rec2["source"]) == ("hf", "bfloat16", "resumed")
    assert any("resuming" in ln for ln in lines) and any("rollout: hf in bfloat16 (resumed" in ln for ln in lines)


def test_a_measured_fp32_choice_leaves_the_run_as_it_was(tiny_dir, tmp_path, monkeypatch):
    """The measurement runs the engine on the run's own model; the run after it is the uncalibrated run."""
    from satseq.loop import train

    monkeypatch.setenv("SATSEQ_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(choice_mod, "MARGIN", 1e9)  # whatever this CPU measures, fp32 is chosen
    rows = {}
    for switch in ("on", "off"):  # run names cal_on, cal_off (a bare "on" reads as true)
        monkeypatch.setenv("SATSEQ_ROLLOUT_CALIBRATION", switch)
        base = [f"model.path={tiny_dir}", f"output_dir={tmp_path}", f"run_name=cal_{switch}", "trainer.num_stages=2", *SMALL]
        train(load_config(None, base), console=lambda *a, **k: None)
        rows[switch] = [{k: v for k, v in json.loads(x).items() if not k.startswith("time/")}
                        for x in (tmp_path / f"cal_{switch}" / "metrics.jsonl").read_text().splitlines()]
    assert json.loads((tmp_path / "cal_on" / "run_info.json").read_text())["rollout"]["source"] == "measured"
    assert rows["on"] == rows["off"]


def test_a_cpu_whose_bf16_matmuls_are_slow_does_not_decode_in_bf16(tiny, calibrating, tmp_path, monkeypatch):
    model, tok = tiny
    cfg = load_config(None, [f"output_dir={tmp_path}"])
    fake, calls = _speeds({"hf/float32": 100.0, "hf/bfloat16": 1000.0})
    monkeypatch.setattr(choice_mod, "bf16_matmul_slowdown", lambda model, device: 6.0)
    got = choose(cfg, model, tok, "cpu", measure_fn=fake)
    assert calls == [("hf", "float32")] and (got.dtype, got.speeds["hf/bfloat16"]) == ("float32", 0.0)
    assert bf16_matmul_slowdown(model, "cpu") > 0  # the real screen runs and returns a ratio


def test_the_decode_gemm_kernel_is_measured_recorded_and_kept_on_resume(tiny_dir, calibrating, tmp_path, monkeypatch):
    """rollout.decode_gemm=auto: every kernel the build has is measured; one other than the default wins only
    by the margin; the choice is in run_info.json and train_config.yaml, and a resumed run keeps it."""
    import torch

    from satseq.loop import train
    from satseq.rollout.fused_decode import available_gemms

    kernels = available_gemms(torch.float32, "cpu")
    if len(kernels) < 2:
        pytest.skip("one decode GEMM kernel in this torch build")
    monkeypatch.undo()  # the real _gemms; the calibration on, the cache in tmp_path, no bf16 screen
    monkeypatch.setenv("SATSEQ_ROLLOUT_CALIBRATION", "on")
    monkeypatch.setenv("SATSEQ_CACHE_DIR", str(tmp_path / "cache"))
    default, other = kernels[0], kernels[1]
    fast = {f"hf/float32/{k}": 100.0 for k in kernels} | {f"hf/float32/{other}": 100.0 * MARGIN * 1.01}
    fake, calls = _speeds(fast)
    monkeypatch.setattr(choice_mod, "measure", fake)
    base = [f"model.path={tiny_dir}", f"output_dir={tmp_path}", "run_name=gemm", "trainer.save_every=1",
            "rollout.dtype=float32", *SMALL]
    train(load_config(None, base + ["trainer.num_stages=1"]), console=lambda *a, **k: None)
    assert sorted(calls) == sorted(("hf", "float32", k) for k in kernels)
    run = tmp_path / "gemm"
    rec = json.loads((run / "run_info.json").read_text())["rollout"]
    assert (rec["engine"], rec["dtype"], rec["gemm"], rec["source"]) == ("hf", "float32", other, "measured")
    assert f"decode_gemm: {other}" in (run / "train_config.yaml").read_text()
    # a new measurement would keep the default now; the resumed run keeps its kernel without measuring
    (tmp_path / "cache" / "rollout_choice.json").unlink()
    fake2, calls2 = _speeds({f"hf/float32/{k}": 100.0 for k in kernels})
    monkeypatch.setattr(choice_mod, "measure", fake2)
    train(load_config(None, base + ["trainer.num_stages=2"]), console=lambda *a, **k: None)
    rec2 = json.loads((run / "run_info.json").read_text())["rollout"]
    assert calls2 == [] and (rec2["gemm"], rec2["source"]) == (other, "resumed")
    # just short of the margin: the default kernel
    cfg = load_config(None, [f"output_dir={tmp_path}", "rollout.engine=hf", "rollout.dtype=float32"])
    slow, _ = _speeds({f"hf/float32/{k}": 100.0 for k in kernels} | {f"hf/float32/{other}": 100.0 * MARGIN * 0.99})
    model_dir_cfg = load_config(None, [f"model.path={tiny_dir}"])
    from satseq.models.loading import load_causal_lm

    model, tok = load_causal_lm(model_dir_cfg.model.path)
    assert choose(cfg, model, tok, "cpu", measure_fn=slow).gemm == default


def test_a_kernel_the_build_lacks_is_refused_in_one_line(tiny_dir, tmp_path, monkeypatch):
    import satseq.runtime as runtime
    from satseq.errors import ConfigError

    monkeypatch.setattr("satseq.rollout.fused_decode.available_gemms", lambda dtype, device: ["torch"])
    cfg = load_config(None, [f"model.path={tiny_dir}", f"output_dir={tmp_path}", "rollout.decode_gemm=onednn"])
    with pytest.raises(ConfigError, match="config key 'rollout.decode_gemm': onednn does not run in float32"):
        runtime.check_decode_gemm(cfg, "cpu")
    # the same config with the kernel present passes
    monkeypatch.setattr("satseq.rollout.fused_decode.available_gemms", lambda dtype, device: ["mkl", "onednn", "torch"])
    runtime.check_decode_gemm(cfg, "cpu")


def test_recorded_reads_back_what_record_wrote_and_nothing_else(tmp_path):
    """``recorded`` (a resumed run's choice, and the compare report's rollout column) round-trips
    ``record``, and is None for a run without a readable rollout record."""
    from satseq.rollout.choice import RolloutChoice, record, recorded

    run = tmp_path / "run"
    assert recorded(run) is None  # not started
    run.mkdir()
    (run / "run_info.json").write_text("{not json")
    assert recorded(run) is None
    (run / "run_info.json").write_text(json.dumps({"seed": 0}))  # from before the choice was recorded
    assert recorded(run) is None
    choice = RolloutChoice("hf", "bfloat16", "measured", {"hf/float32": 100.0, "hf/bfloat16/onednn": 150.0}, "onednn")
    (run / "run_info.json").write_text(json.dumps({"rollout": record(choice)}))
    back = recorded(run)
    assert (back.engine, back.dtype, back.gemm, back.speeds, back.source) == \
        ("hf", "bfloat16", "onednn", choice.speeds, "resumed")
