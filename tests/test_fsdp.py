"""Sharded training inside an agent (``trainer.strategy=fsdp2``, torch's FSDP2 on 2 Gloo ranks) trains
what 1 process trains, and its torch.distributed.checkpoint trainer state resumes exactly, on 2 ranks or 1.

Real ``torchrun`` launches on the tiny model, as in tests/test_ddp.py. FSDP2 reduce-scatters the mean
of the ranks' gradients; without the × N of ``satseq.scale.fsdp.backward_scale`` the 2-rank weights
end 1.1e-3 away from the 1-process ones in the SAT-Seq test here (measured once, patched by hand; the
tolerance is a hundredth of what the weights moved, tests/numerics.py), so the comparison can fail.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import warm_cli
import torch
from numerics import update_tol

ROOT = Path(__file__).resolve().parents[1]
FAST = ["trainer.train_batch_size=3", "sat_seq.group_size=2", "grpo.group_size=2", "rollout.max_new_tokens=8",
        "data.train_size=16", "data.eval_size=4", "threads=1", "trainer.tensorboard=false", "trainer.progress=false",
        "sat_seq.certificate.prompts=4", "sat_seq.certificate.samples=2",
        "reward.custom=tests.reward_fixtures:length_parity", "trainer.num_stages=3", "run_name=r"]
# SAT-Seq, K = 3, full fine-tuning, the certificate on; lr and target such that one step is shrunk
# (agent_2 at stage 0: backtracks 1) and the others are accepted whole
SAT_SEQ = [*FAST, "sat_seq.lr=3e-4", "algorithm.kl_ctrl.target_kl=0.1"]
AGENTS = ("agent_1", "agent_2", "agent_3")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(args, ranks: int, env=None, check: bool = True):
    launch = [sys.executable, "-m", "satseq.cli"] if ranks == 1 else [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(ranks),
        "--master_addr", "127.0.0.1", "--master_port", str(_free_port()), "-m", "satseq.cli"]
    r = warm_cli.run([*launch, "train", *args], timeout=300, cwd=ROOT,
                     env=dict(os.environ, OMP_NUM_THREADS="1", **(env or {})))
    if check:
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    return r


def _exports(run: Path, names=AGENTS, stage: int = 3) -> dict:
    """The seed's ``agent_k_stage_N.pt`` (gathered and written by rank 0 under fsdp2)."""
    return {n: torch.load(run / f"{n}_stage_{stage}.pt") for n in names}


def _max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys() and all(a[n].keys() == b[n].keys() for n in a)
    return max(float((a[n][k] - b[n][k]).abs().max()) for n in a for k in a[n])


def _metrics(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def _same_decisions(m1: list[dict], m2: list[dict]) -> None:
    """The same tokens, certificate counts and KL-check decisions; the KL check's quantile and the loss
    within floating-point order."""
    assert [r["step"] for r in m1] == [r["step"] for r in m2]
    for a, b in zip(m1, m2):
        same = [k for k in a if k.startswith(("rollout/", "certificate/", "stage/")) or k.endswith(
            ("/response_length", "/accepted", "/backtracks"))]
        assert {k: a[k] for k in same} == {k: b[k] for k in same}
        for k in (k for k in a if k.endswith(("/kl_quantile", "/loss"))):
            assert b[k] == pytest.approx(a[k], rel=1e-3, abs=1e-7), k


@pytest.fixture(scope="module")
def sat_runs(tiny_dir, tmp_path_factory):
    """SAT-Seq on 1 process (strategy replicate: the plain path) and on 2 ranks with fsdp2; and a
    2-rank fsdp2 run killed (SIGKILL) in the middle of stage 1, its trainer state that of stage 0."""
    out = tmp_path_factory.mktemp("fsdp_sat")
    args = [f"model.path={tiny_dir}", *SAT_SEQ]
    _launch([*args, f"output_dir={out}/one"], 1)
    _launch([*args, "trainer.strategy=fsdp2", f"output_dir={out}/two"], 2)
    killed = _launch([*args, "trainer.strategy=fsdp2", f"output_dir={out}/killed"], 2,
                     env={"SATSEQ_KILL_AT_STAGE": "1"}, check=False)
    assert killed.returncode != 0
    return {"args": [*args, "trainer.strategy=fsdp2"], "one": out / "one" / "r", "two": out / "two" / "r",
            "killed": out / "killed"}


@pytest.mark.numerics
def test_fsdp2_sat_seq_equals_one_process(sat_runs, tiny_dir):
    one, two = sat_runs["one"], sat_runs["two"]
    info = json.loads((two / "run_info.json").read_text())
    assert info["data_parallel_ranks"] == 2 and info["strategy"] == "fsdp2"
    # the trainer state is torch.distributed.checkpoint's: one file per rank plus the metadata
    assert sorted(p.name for p in (two / "trainer_state" / "dcp").iterdir()) == [".metadata", "__0_0.distcp",
                                                                                   "__1_0.distcp"]
    w1, w2 = _exports(one), _exports(two)
    from safetensors.torch import load_file

    init = load_file(str(next(Path(tiny_dir).glob("*.safetensors"))))
    moved = max(float((w1[n][k] - init[k]).abs().max()) for n in w1 for k in w1[n] if k in init)
    diff = _max_diff(w1, w2)
    assert diff < update_tol(moved), (diff, moved)
    # the HF checkpoint rank 0 wrote holds the gathered weights, the same as the .pt export
    hf = load_file(str(two / "agent_2_stage_3" / "model.safetensors"))
    assert all(torch.equal(hf[k], v) for k, v in w2["agent_2"].items() if k in hf)

    m1, m2 = _metrics(one), _metrics(two)
    _same_decisions(m1, m2)
    assert m2[0]["agent_2/backtracks"] == 1 and m2[0]["agent_2/step_scale"] == 0.5  # a step the check shrank
    assert all(r["agent_1/backtracks"] == 0 for r in m2)
    assert m2[-1]["certificate/n"] == 4


def test_killed_fsdp2_run_resumes_exactly(sat_runs, tmp_path):
    run = tmp_path / "killed"
    shutil.copytree(sat_runs["killed"], run)
    assert [r["step"] for r in _metrics(run / "r")] == [0]
    again = _launch([*sat_runs["args"], f"output_dir={run}"], 2)
    assert "resuming" in again.stdout + again.stderr
    assert _metrics(run / "r") == _metrics(sat_runs["two"])
    assert _max_diff(_exports(run / "r"), _exports(sat_runs["two"])) == 0.0


@pytest.mark.numerics
def test_two_rank_checkpoint_resumes_on_one_rank(sat_runs, tiny_dir, tmp_path):
    run = tmp_path / "killed"
    shutil.copytree(sat_runs["killed"], run)
    again = _launch([*sat_runs["args"], f"output_dir={run}"], 1)  # the 2-rank shards, resharded to 1 process
    assert "resuming" in again.stdout + again.stderr
    _same_decisions(_metrics(sat_runs["one"]), _metrics(run / "r"))
    from safetensors.torch import load_file

    one = _exports(sat_runs["one"])
    init = load_file(str(next(Path(tiny_dir).glob("*.safetensors"))))
    moved = max(float((one[n][k] - init[k]).abs().max()) for n in one for k in one[n] if k in init)
    assert _max_diff(_exports(run / "r"), one) < update_tol(moved)


@pytest.mark.numerics
def test_fsdp2_grpo_lora_equals_one_process(tiny_dir, tmp_path):
    args = [f"model.path={tiny_dir}", "method=grpo", "ppo.kl_coef=0.01", "model.lora.enabled=true",
            "model.lora.r=4", "model.lora.dropout=0", *FAST]  # dropout masks would differ from 1 process's
    _launch([*args, f"output_dir={tmp_path}/one"], 1)
    _launch([*args, "trainer.strategy=fsdp2", f"output_dir={tmp_path}/two"], 2)
    w1, w2 = _exports(tmp_path / "one" / "r", ["policy"]), _exports(tmp_path / "two" / "r", ["policy"])
    moved = max(float(v.abs().max()) for k, v in w1["policy"].items() if "lora_B" in k)  # lora_B starts at 0
    assert _max_diff(w1, w2) < update_tol(moved), (_max_diff(w1, w2), moved)
    m1, m2 = _metrics(tmp_path / "one" / "r"), _metrics(tmp_path / "two" / "r")
    assert [r["rollout/generated_tokens"] for r in m1] == [r["rollout/generated_tokens"] for r in m2]
    assert [r["policy/kl_ref"] for r in m2] == pytest.approx([r["policy/kl_ref"] for r in m1], rel=1e-3, abs=1e-9)
    assert (tmp_path / "two" / "r" / "policy_stage_3" / "adapter_model.safetensors").exists()


def test_torchrun_with_more_ranks_than_prompts_is_one_line_error(tiny_dir, tmp_path):
    args = [f"model.path={tiny_dir}", "trainer.strategy=fsdp2", "trainer.train_batch_size=1", f"output_dir={tmp_path}"]
    r = _launch(args, 2, check=False)
    line = ("error: config key 'trainer.train_batch_size': 1 prompts per stage cannot be split over 2 ranks "
            "(each needs at least one): raise it or launch fewer ranks")
    # the first rank to fail prints the line; torchrun may stop the other before it prints its own
    assert r.returncode != 0 and r.stderr.count(line) in (1, 2), r.stderr[-3000:]
    assert "satseq/" not in r.stderr and not (tmp_path / "r").exists()  # no traceback through satseq's code
    # a rank's own output is that one line (torchrun's report around it is torchrun's)
    one = subprocess.run([sys.executable, "-m", "satseq.cli", "train", *args], capture_output=True, text=True,
                         timeout=120, cwd=ROOT, env=dict(os.environ, WORLD_SIZE="2", RANK="0", LOCAL_RANK="0"))
    assert one.returncode == 2 and one.stderr.strip() == line, one.stderr


def test_fsdp_layout_errors_name_their_key():
    from satseq.config import load_config
    from satseq.errors import ConfigError
    from satseq.scale.fsdp import check_layout

    cases = {("trainer.strategy=fsdp2", "trainer.backend=ray"): "'trainer.strategy': fsdp2",
             ("trainer.strategy=fsdp2", "trainer.fsdp_mixed_precision=bf16", "device=cpu"):
                 "'trainer.fsdp_mixed_precision': for CUDA devices",
             ("trainer.fsdp_cpu_offload=true",): "'trainer.fsdp_cpu_offload': an FSDP2 option",
             ("device=cuda", "trainer.train_batch_size=8"): "'device': torchrun started 2 ranks on this node, which has 1"}
    for overrides, msg in cases.items():
        with pytest.raises(ConfigError, match=msg):
            check_layout(load_config(None, list(overrides)), 2, cuda_devices=1)
    check_layout(load_config(None, ["trainer.strategy=fsdp2"]), 2)  # a layout that can run
