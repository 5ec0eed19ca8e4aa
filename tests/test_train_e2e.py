"""End-to-end training on a tiny model: outputs, exact resume after a kill, GRPO, bad input."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import warm_cli
from numerics import fp_tol


FAST = ["trainer.train_batch_size=2", "sat_seq.group_size=2", "grpo.group_size=2", "rollout.max_new_tokens=6",
        "data.train_size=16", "data.eval_size=4", "threads=1", "trainer.tensorboard=false", "trainer.progress=false"]


def _train(args, env=None):
    e = dict(os.environ, **(env or {}))
    return warm_cli.run([sys.executable, "-m", "satseq.cli", "train", *args], env=e, timeout=300)


def _metrics(run_dir: Path):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def test_sat_seq_run_writes_outputs_and_resumes_exactly_after_a_kill(tiny_dir, tmp_path):
    common = [f"model.path={tiny_dir}", "model.lora.enabled=true", "model.lora.r=4", "trainer.num_stages=3",
              "trainer.save_every=2", *FAST]
    full = _train([*common, f"output_dir={tmp_path}/a"])
    assert full.returncode == 0, full.stderr
    run = tmp_path / "a" / "sat_seq_dapo"
    for name in ("agent_1", "agent_2", "agent_3"):
        for stage in (2, 3):
            assert (run / f"{name}_stage_{stage}" / "adapter_model.safetensors").exists()
            assert (run / f"{name}_stage_{stage}.pt").exists()
    assert (run / "train_config.yaml").exists() and (run / "trainer_state" / "state.pt").exists()
    ref = _metrics(run)
    assert [r["step"] for r in ref] == [0, 1, 2]
    assert all("agent_2/kl_quantile" in r and "agent_2/step_scale" in r for r in ref)
    assert "certificate/start_vote_upper" in ref[0] and "certificate/vote_lower" not in ref[1]
    last = ref[-1]  # the certificate after the last stage, and the certified improvement over the warm start
    assert 0.0 <= last["certificate/vote_lower"] <= last["certificate/vote_mean"] and last["certificate/n"] == 256
    assert last["certificate/vote_improvement_lower"] < 0  # the random tiny model cannot certify a gain

    killed = _train([*common, f"output_dir={tmp_path}/b"], env={"SATSEQ_KILL_AT_STAGE": "1"})
    assert killed.returncode != 0
    part = tmp_path / "b" / "sat_seq_dapo"
    assert [r["step"] for r in _metrics(part)] == [0]
    resumed = _train([*common, f"output_dir={tmp_path}/b"])
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming" in resumed.stdout + resumed.stderr
    assert _metrics(part) == ref


def test_grpo_run(tiny_dir, tmp_path):
    r = _train([f"model.path={tiny_dir}", "method=grpo", "trainer.num_stages=2", "ppo.kl_coef=0.01", *FAST,
                f"output_dir={tmp_path}", "run_name=g"])
    assert r.returncode == 0, r.stderr
    rows = _metrics(tmp_path / "g")
    assert len(rows) == 2 and "policy/kl_ref" in rows[0] and "policy/loss" in rows[0]
    assert all(r["reward/timeouts"] == 0 for r in rows)  # gradings killed at reward.timeout, per stage
    assert (tmp_path / "g" / "policy_stage_2" / "model.safetensors").exists()


def _error(result):
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.mark.parametrize("content, expected", [
    ('{"problem": "1+1", "answer": "2"}\n{"problem": "2+2", "answer": \n', "train.jsonl:2"),
    ('{"problem": "1+1", "answer": "2"}\n{"problem": "2+2"}\n', "train.jsonl:2"),
    ("", "train.jsonl"),
])
def test_bad_training_data_is_one_line_and_writes_nothing(tiny_dir, tmp_path, content, expected):
    data = tmp_path / "train.jsonl"
    data.write_text(content)
    line = _error(_train([f"model.path={tiny_dir}", f"data.train={data}", f"output_dir={tmp_path}/out", *FAST]))
    assert expected in line
    assert not (tmp_path / "out").exists()


def test_bad_config_and_paths(tiny_dir, tmp_path):
    assert "sat_seq.epsilonn" in _error(_train(["sat_seq.epsilonn=0.1", f"output_dir={tmp_path}"]))
    assert "sat_seq.epsilon" in _error(_train(["sat_seq.epsilon=abc", f"output_dir={tmp_path}"]))
    line = _error(_train([f"model.path={tiny_dir}", "sat_seq.agents.1.path=/no/such/model", f"output_dir={tmp_path}"]))
    assert "sat_seq.agents[1].path" in line and "/no/such/model" in line
    empty = tmp_path / "empty_data_dir"
    empty.mkdir()
    line = _error(_train([f"model.path={tiny_dir}", "data.train=gsm8k", f"data.data_dir={empty}",
                          f"output_dir={tmp_path}"], env={"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}))
    assert "gsm8k" in line and str(empty) in line
    assert not (tmp_path / "sat_seq_dapo").exists()


def test_dapo_format_training_data(tiny_dir, tmp_path):
    """The seed's {"prompt","chosen","rejected"} rows train; the answer is the box of `chosen`."""
    data = tmp_path / "train.jsonl"
    rows = [{"prompt": f"{100 + i}+{200 + i}", "chosen": f"so \\boxed{{{300 + 2 * i}}}", "rejected": "\\boxed{0}"}
            for i in range(6)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = _train([f"model.path={tiny_dir}", f"data.train={data}", "trainer.num_stages=1", *FAST,
                f"output_dir={tmp_path}", "run_name=dapo"])
    assert r.returncode == 0, r.stderr
    assert len(_metrics(tmp_path / "dapo")) == 1
    from satseq.data.loading import load_problems

    assert [p.answer for p in load_problems(str(data))][:2] == ["300", "302"]


def test_apo_stage1_cache_then_stage2_training(tiny_dir, tmp_path):
    args = [f"model.path={tiny_dir}", "method=apo", "apo.n_samples=3", "apo.lr=1e-4", *FAST,
            f"output_dir={tmp_path}", "run_name=apo"]
    v = warm_cli.run([sys.executable, "-m", "satseq.cli", "vstar", *args], timeout=300)
    assert v.returncode == 0, v.stderr
    cache = json.loads((tmp_path / "apo" / "vstar.json").read_text())
    assert len(cache["problem_ids"]) == 16 and all(len(r) == 3 for r in cache["rewards"])
    r = _train([*args, "trainer.num_stages=2"])
    assert r.returncode == 0, r.stderr
    rows = _metrics(tmp_path / "apo")
    assert len(rows) == 2 and "policy/loss" in rows[0] and "apo/vstar_mean" in rows[0]
    # a cache made for another N is refused, naming what differs
    line = _error(_train([*args, "apo.n_samples=5", "run_name=apo", "resume=false"]))
    assert "vstar.json" in line


def test_train_dapo_launcher_honours_its_environment(tiny_dir, tmp_path):
    env = dict(os.environ, TRAIN_BATCH_SIZE="2", NUM_STAGES="1", AGENT1_PATH=str(tiny_dir),
               AGENT2_PATH=str(tiny_dir), AGENT3_PATH=str(tiny_dir), RUN_NAME="launcher")
    r = subprocess.run(["bash", "recipes/sat_seq/train_dapo.sh", f"output_dir={tmp_path}", "sat_seq.group_size=2",
                        "rollout.max_new_tokens=6", "data.train_size=8", "data.eval_size=4", "threads=1",
                        "trainer.progress=false", "model.lora.enabled=false"],
                       capture_output=True, text=True, env=env, timeout=300, cwd=Path(__file__).resolve().parents[1])
    assert r.returncode == 0, r.stderr
    cfg = (tmp_path / "launcher" / "train_config.yaml").read_text()
    assert "train_batch_size: 2" in cfg and "num_stages: 1" in cfg and str(tiny_dir) in cfg
    assert (tmp_path / "launcher" / "agent_3_stage_1" / "config.json").exists()


@pytest.mark.numerics
def test_lora_run_warm_start_is_the_base_model_as_stage_0_adapters(tiny_dir, tmp_path):
    """satseq compare's warm-start row for a LoRA run: fresh adapters (B = 0) saved as stage 0, so the
    evaluated policy is exactly the base model in the run's own workflow and prompting."""
    import torch

    from satseq.compare.baselines import warm_start_run
    from satseq.eval.targets import load_target
    from satseq.models.loading import load_causal_lm

    r = _train([f"model.path={tiny_dir}", "model.lora.enabled=true", "model.lora.r=4", "trainer.num_stages=1",
                *FAST, f"output_dir={tmp_path}", "run_name=s"])
    assert r.returncode == 0, r.stderr
    warm = warm_start_run(tmp_path / "s", tmp_path / "cmp")
    assert warm is not None and warm_start_run(tmp_path / "s", tmp_path / "cmp") == warm  # made once
    # a run that differs only in how its update weights the engine's samples shares the evaluation; one
    # that samples differently does not
    import shutil
    for name, old, new in (("c", "is_correction: auto", "is_correction: token"),
                           ("t", "temperature: 1.0", "temperature: 0.5")):
        shutil.copytree(tmp_path / "s", tmp_path / name)
        text = (tmp_path / name / "train_config.yaml").read_text()
        assert old in text
        (tmp_path / name / "train_config.yaml").write_text(text.replace(old, new))
    assert warm_start_run(tmp_path / "c", tmp_path / "cmp") == warm
    assert warm_start_run(tmp_path / "t", tmp_path / "cmp") not in (None, warm)
    # a resumed run records where its engine choice came from, not another engine: the same warm start
    import json
    shutil.copytree(tmp_path / "s", tmp_path / "r")
    info = json.loads((tmp_path / "r" / "run_info.json").read_text())
    assert info["rollout"]["source"] != "resumed"
    info["rollout"].update(source="resumed", speeds={"hf/float32/torch": 1.0})
    (tmp_path / "r" / "run_info.json").write_text(json.dumps(info))
    assert warm_start_run(tmp_path / "r", tmp_path / "cmp") == warm
    # a run prompted otherwise (another few-shot template) starts from another policy in effect: its own warm
    # start, evaluated with its own template, whichever of the two comes first (a study's existing
    # directory keeps its name: the first to come keeps the key made before the prompt joined it)
    from satseq.compare.baselines import _prompting, _saved_prompting
    from satseq.config import load_config

    shutil.copytree(tmp_path / "s", tmp_path / "p")
    text = (tmp_path / "p" / "train_config.yaml").read_text()
    assert "prompt_template: boxed" in text
    (tmp_path / "p" / "train_config.yaml").write_text(text.replace("prompt_template: boxed",
                                                                   "prompt_template: 'Q: 1 + 2? A: 3. Q: {problem} A:'"))
    for first, second in (("s", "p"), ("p", "s")):
        shutil.rmtree(tmp_path / "cmp", ignore_errors=True)
        a, b = warm_start_run(tmp_path / first, tmp_path / "cmp"), warm_start_run(tmp_path / second, tmp_path / "cmp")
        assert None not in (a, b) and a != b
        for run, d in ((first, a), (second, b)):
            assert _saved_prompting(d) == _prompting(load_config(tmp_path / run / "train_config.yaml", [], saved=True))
            assert warm_start_run(tmp_path / run, tmp_path / "cmp") == d  # found again
    # a restored study: evaluations kept, directories not; the one prompted otherwise does not take the other's
    shutil.rmtree(tmp_path / "cmp")
    legacy = warm_start_run(tmp_path / "s", tmp_path / "cmp")
    shutil.rmtree(tmp_path / "cmp" / "baselines")
    (tmp_path / "cmp" / "evals" / legacy.name).mkdir(parents=True)
    preds = tmp_path / "cmp" / "evals" / legacy.name / "predictions.jsonl"
    preds.write_text(json.dumps({"prompt": "Solve: 2 + 2. Put the answer in \\boxed{}."}) + "\n")
    assert warm_start_run(tmp_path / "p", tmp_path / "cmp").name != legacy.name
    shutil.rmtree(tmp_path / "cmp" / "baselines")
    preds.write_text(json.dumps({"prompt": "Q: 1 + 2? A: 3. Q: 2 + 2 A:"}) + "\n")
    assert warm_start_run(tmp_path / "p", tmp_path / "cmp").name == legacy.name
    shutil.rmtree(tmp_path / "cmp")
    warm = warm_start_run(tmp_path / "s", tmp_path / "cmp")
    for a in ("agent_1", "agent_2", "agent_3"):
        assert (warm / f"{a}_stage_0" / "adapter_model.safetensors").is_file()
    target = load_target(warm, stage=0, console=lambda *a, **k: None)
    base, _ = load_causal_lm(tiny_dir)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        want = base(input_ids=ids).logits
        for a in target.agents:
            torch.testing.assert_close(target.pool.module(a)(input_ids=ids).logits, want, rtol=0, atol=fp_tol(want))
    assert target.stop == tuple(load_target(tmp_path / "s", console=lambda *a, **k: None).stop)


def test_single_agent_lora_run_loads_its_adapter_on_the_base(tiny_dir, tmp_path):
    """A one-agent LoRA run (GRPO) evaluates as base + its adapter (its one adapter dir is not the base)."""
    from satseq.eval.targets import load_target

    r = _train([f"model.path={tiny_dir}", "model.lora.enabled=true", "model.lora.r=4", "method=grpo",
                "trainer.num_stages=1", *FAST, f"output_dir={tmp_path}", "run_name=g"])
    assert r.returncode == 0, r.stderr
    target = load_target(tmp_path / "g", console=lambda *a, **k: None)
    assert target.pool.mode == "lora" and target.agents == ["policy"]
