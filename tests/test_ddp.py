"""Data parallel inside an agent (torch.distributed, Gloo on CPU): 2 ranks train what 1 rank trains.

The runs are real ``torchrun`` launches (``python -m torch.distributed.run --nproc_per_node 2 -m
satseq.cli train ...``) on the tiny model, with a reward that varies inside every group so the
agents do learn. Without the gradient all-reduce the 2-rank weights end ~2e-4 away from the 1-rank
ones after 3 SAT-Seq stages (measured); with it, ~4e-7 (floating-point order of the sums).
"""
import json
import os
import socket
import sys
from pathlib import Path

import pytest
import warm_cli
import torch
from numerics import update_tol
from safetensors.torch import load_file

FAST = ["trainer.train_batch_size=3", "sat_seq.group_size=2", "grpo.group_size=2", "rollout.max_new_tokens=8",
        "data.train_size=16", "data.eval_size=4", "threads=1", "trainer.tensorboard=false", "trainer.progress=false",
        "sat_seq.certificate.prompts=4", "sat_seq.certificate.samples=2",
        "reward.custom=tests.reward_fixtures:length_parity", "trainer.num_stages=3", "run_name=r"]
ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _train(args, ranks: int = 1, stop_after: int | None = None):
    launch = [sys.executable, "-m", "satseq.cli"] if ranks == 1 else [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(ranks),
        "--master_addr", "127.0.0.1", "--master_port", str(_free_port()), "-m", "satseq.cli"]
    extra = [] if stop_after is None else ["--stop-after", str(stop_after)]
    r = warm_cli.run([*launch, "train", *args, *extra], timeout=300, cwd=ROOT,
                     env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    return r


def _weights(run: Path) -> dict[str, dict[str, torch.Tensor]]:
    return {f.stem: load_file(str(f)) for f in sorted((run / "trainer_state").glob("*.safetensors"))}


def _max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[n][k] - b[n][k]).abs().max()) for n in a for k in a[n])


def _metrics(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


@pytest.mark.numerics
def test_two_ranks_train_the_weights_one_rank_trains(tiny_dir, tmp_path):
    args = [f"model.path={tiny_dir}", *FAST]  # SAT-Seq, K = 3, full fine-tuning, certificate on
    _train([*args, f"output_dir={tmp_path}/one"])
    two = _train([*args, f"output_dir={tmp_path}/two"], ranks=2)
    run1, run2 = tmp_path / "one" / "r", tmp_path / "two" / "r"
    assert json.loads((run2 / "run_info.json").read_text())["data_parallel_ranks"] == 2
    assert two.stdout.count("run directory:") == 1  # rank 1 prints nothing

    w1, w2 = _weights(run1), _weights(run2)
    init = load_file(str(next(Path(tiny_dir).glob("*.safetensors"))))
    moved = max(float((w1[n][k] - init[k]).abs().max()) for n in w1 for k in w1[n])
    diff = _max_diff(w1, w2)
    assert diff < update_tol(moved), (diff, moved)

    m1, m2 = _metrics(run1), _metrics(run2)
    assert [r["step"] for r in m2] == [0, 1, 2]
    for a, b in zip(m1, m2):
        # the sharded rollouts sample the very same tokens, and the certificate's reduced counts agree
        same = [k for k in a if k.startswith(("rollout/", "certificate/")) or k.endswith(("/response_length",
                                                                                        "/accepted", "/backtracks"))]
        assert {k: a[k] for k in same} == {k: b[k] for k in same}
        for k in (k for k in a if k.endswith(("/kl_quantile", "/loss"))):  # KL check over all ranks' states
            assert b[k] == pytest.approx(a[k], rel=1e-3, abs=1e-7), k
    assert "certificate/vote_lower" in m2[-1] and m2[-1]["certificate/n"] == 4


def test_two_rank_lora_run_with_dropout_resumes_exactly(tiny_dir, tmp_path):
    # LoRA dropout: each rank draws its rows' masks from its own torch RNG, and with 9 turns per agent
    # (3 prompts x 3) the ranks' rows differ in number, so their RNG states part; the trainer state keeps each
    fast = [a for a in FAST if not a.startswith("sat_seq.group_size=")] + ["sat_seq.group_size=3"]
    args = [f"model.path={tiny_dir}", "model.lora.enabled=true", "model.lora.r=4", "model.lora.dropout=0.05", *fast]
    _train([*args, f"output_dir={tmp_path}/full"], ranks=2)
    _train([*args, f"output_dir={tmp_path}/part"], ranks=2, stop_after=1)
    part, full = tmp_path / "part" / "r", tmp_path / "full" / "r"
    assert [r["step"] for r in _metrics(part)] == [0]
    again = _train([*args, f"output_dir={tmp_path}/part"], ranks=2)
    assert "resuming" in again.stdout + again.stderr
    assert _metrics(part) == _metrics(full)
    assert _max_diff(_weights(part), _weights(full)) == 0.0


@pytest.mark.numerics
def test_grpo_lora_two_ranks_match_one(tiny_dir, tmp_path):
    args = [f"model.path={tiny_dir}", "method=grpo", "ppo.kl_coef=0.01", "model.lora.enabled=true",
            "model.lora.r=4", "model.lora.dropout=0", *FAST]  # dropout masks would differ from 1 rank's
    _train([*args, f"output_dir={tmp_path}/one"])
    _train([*args, f"output_dir={tmp_path}/two"], ranks=2)
    w1, w2 = _weights(tmp_path / "one" / "r"), _weights(tmp_path / "two" / "r")
    moved = max(float(v.abs().max()) for k, v in w1["policy"].items() if "lora_B" in k)  # lora_B starts at 0
    assert _max_diff(w1, w2) < update_tol(moved), (_max_diff(w1, w2), moved)
    m1, m2 = _metrics(tmp_path / "one" / "r"), _metrics(tmp_path / "two" / "r")
    assert [r["rollout/generated_tokens"] for r in m1] == [r["rollout/generated_tokens"] for r in m2]
    assert [r["policy/kl_ref"] for r in m2] == pytest.approx([r["policy/kl_ref"] for r in m1], rel=1e-3, abs=1e-9)


def test_torchrun_with_the_ray_backend_is_one_line_error(tiny_dir, tmp_path):
    r = warm_cli.run([sys.executable, "-m", "satseq.cli", "train", f"model.path={tiny_dir}", "trainer.backend=ray",
                      f"output_dir={tmp_path}"], timeout=120, cwd=ROOT,
                     env=dict(os.environ, OMP_NUM_THREADS="1", WORLD_SIZE="2", RANK="0", LOCAL_RANK="0"))
    assert r.returncode == 2 and r.stderr.startswith("error: config key 'trainer.backend'"), r.stderr
    assert "Traceback" not in r.stderr and not any(tmp_path.iterdir())


# ------------------------------------------------------------------ the collectives, in-process
def _collectives(rank: int, port: int, errors) -> None:
    import torch.distributed as dist

    from satseq.scale import ddp

    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
        # 3 rows of ragged width, by prompt key: rank 0 owns rows 0 and 2 (key "a"), rank 1 row 1; 1 row:
        # rank 1 owns none
        keys = [[1, 5], [2, 0], [1, 5]]
        assert ddp.owned_rows(3) == [[0, 1], [2]][rank]  # no keys: contiguous blocks in batch order
        assert ddp.rank_rows(5, [[3], [1], [2], [1], [3]]) == [[1, 3, 2], [0, 4]]  # equal prompts together
        full = torch.arange(3 * 4, dtype=torch.float32).reshape(3, 4)
        assert ddp.owned_rows(3, keys) == [[0, 2], [1]][rank]
        local = full[1:2, :2] if rank == 1 else torch.stack([full[0], torch.nn.functional.pad(full[2, :3], (0, 1))])
        got = ddp.gather_rows(local, 3, keys)
        want = full.clone()
        want[1, 2:] = 0
        want[2, 3:] = 0
        assert torch.equal(got, want), got
        one = ddp.gather_rows(full[:1, :2] if rank == 0 else torch.zeros((0, 0)), 1)
        assert torch.equal(one, full[:1, :2])
        # the loss of the stitched batch: each rank's backward through its rows, summed = the full gradient
        w = torch.nn.Parameter(torch.tensor([0.5, -1.0, 2.0]))
        unused = torch.nn.Parameter(torch.ones(2))
        x = torch.tensor([[1.0, 2.0, 3.0], [0.0, 1.0, -1.0], [2.0, 0.5, 1.0]])
        rows = x[ddp.owned_rows(3, keys)] * w
        loss = (ddp.share_rows(rows, 3, keys).sum(dim=1) ** 2).mean()
        loss.backward()
        ddp.all_reduce_grads([w, unused])
        ref_w = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
        ((x * ref_w).sum(dim=1) ** 2).mean().backward()
        assert torch.allclose(w.grad, ref_w.grad) and unused.grad is None
        assert ddp.all_reduce_sum([1.0, float(rank)]) == [2.0, 1.0]
        assert ddp.shard_bounds(3) == [(0, 2), (2, 3)][rank]
        # every rank's own torch RNG state is kept (dropout masks differ per rank) and given back to it
        torch.manual_seed(100 + rank)
        saved, mine = ddp.rng_states(), torch.get_rng_state()
        torch.rand(5)
        ddp.restore_rng(saved)
        assert torch.equal(torch.get_rng_state(), mine) and not torch.equal(saved[0], saved[1])
    except BaseException as e:  # noqa: BLE001  (reported to the parent)
        errors.put(f"rank {rank}: {type(e).__name__}: {e}")
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


@pytest.mark.numerics
def test_row_gather_and_gradient_sum_over_two_gloo_ranks():
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    errors = ctx.SimpleQueue()
    mp.start_processes(_collectives, args=(_free_port(), errors), nprocs=2, start_method="spawn", join=True)
    found = []
    while not errors.empty():
        found.append(errors.get())
    assert not found, found
