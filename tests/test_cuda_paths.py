"""The paths that differ on CUDA, checked on CUDA when there is one (``pytest -m cuda``: bench/scale/gpu_check.sh
runs them), and, where the same code runs on CPU, checked here too.

* FSDP2 on a one-rank process group (Gloo on CPU, NCCL on CUDA: one GPU holds one rank): sharding
  per layer then the root, the trainer's forward through the root, the backward at scale 1, the
  clipping over all shards, AdamW on DTensors, and the per-tensor gather into a plain copy equal
  the plain model's update; on CUDA also the bf16 mixed-precision policy and the CPU offload.
* The rollout engine's behaviour log-probs against the trainer's recomputed ones, on CUDA, fp32 and
  bf16 rollouts.
"""
import copy
import socket

import pytest
import torch
from numerics import fp_tol, update_tol

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="no CUDA device")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _update(model, batch, device, clip: float = 0.05):
    from satseq.update.batch import batch_logprobs
    from satseq.update.loop import optimizer_step

    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    for _ in range(2):
        lp, mask = batch_logprobs(model, batch, 0, temperature=1.0, device=device, grad=True)
        loss = -(lp * mask).sum() / mask.sum()
        optimizer_step(opt, loss, [p for p in model.parameters() if p.requires_grad], clip)
    return float(loss.detach())


def _one_rank_fsdp(device: str, **policies) -> tuple[float, float, float, float]:
    """(max |Δ| between the sharded and the plain model after 2 clipped AdamW steps, how far the plain
    model's weights moved, the two losses)."""
    import torch.distributed as dist

    from satseq.models.agents import AgentPool
    from satseq.models.tiny import build_tiny_model
    from satseq.scale import fsdp
    from satseq.update.batch import TurnBatch

    dist.init_process_group("nccl" if device == "cuda" else "gloo", init_method=f"tcp://127.0.0.1:{_port()}",
                            rank=0, world_size=1)
    try:
        model, tok = build_tiny_model(seed=3)
        model = model.to(device)
        plain, copy_for_rollouts, start = copy.deepcopy(model), copy.deepcopy(model), copy.deepcopy(model)
        mesh = fsdp.device_mesh(device)
        fsdp.shard_model(model, mesh, **policies)
        assert fsdp.is_sharded(model) and fsdp.has_dtensors(model.parameters())
        reference = fsdp.sharded_copy(model, mesh, **policies)  # full fine-tuning's frozen reference
        ids = [tok(t, add_special_tokens=False)["input_ids"] for t in ("12+7=", "3+45=", "8+8=")]
        batch = TurnBatch(ids, [[5, 6, 7], [9, 4], [3, 3, 3, 2]], torch.arange(3), torch.zeros(3), [[0.0]] * 3)
        loss_sharded = _update(model, batch, device)
        loss_plain = _update(plain, batch, device)
        from satseq.update.batch import batch_logprobs

        ref_lp = batch_logprobs(reference, batch, 0, temperature=1.0, device=device)[0]
        start_lp = batch_logprobs(copy_for_rollouts, batch, 0, temperature=1.0, device=device)[0]
        tol = fp_tol(start_lp, dtype=torch.bfloat16 if policies.get("mixed_precision") == "bf16" else torch.float32)
        assert float((ref_lp - start_lp).abs().max()) < tol  # the copy kept the start weights
        assert not any(p.requires_grad for p in reference.parameters())
        pool = AgentPool.full(["a"], [model], tok, device=device)
        rollouts = fsdp.GatheredRollouts(None, pool, AgentPool.full(["a"], [copy_for_rollouts], tok, device=device))
        rollouts.sync_weights()  # per tensor, full_tensor(), into the plain copy
        diff = max(float((p.detach().float() - q.detach().float()).abs().max())
                   for p, q in zip(copy_for_rollouts.parameters(), plain.parameters()))
        moved = max(float((p.detach().float() - q.detach().float()).abs().max())
                    for p, q in zip(plain.parameters(), start.parameters()))
        return diff, moved, loss_sharded, loss_plain
    finally:
        dist.destroy_process_group()


@pytest.mark.numerics
def test_fsdp2_on_one_gloo_rank_updates_as_the_plain_model():
    diff, moved, ls, lp = _one_rank_fsdp("cpu")
    assert diff < update_tol(moved) and ls == pytest.approx(lp, abs=fp_tol(lp)), (diff, moved, ls, lp)


@pytest.mark.cuda
@needs_cuda
def test_fsdp2_on_one_nccl_rank_updates_as_the_plain_model():
    diff, moved, ls, lp = _one_rank_fsdp("cuda")
    assert diff < update_tol(moved) and ls == pytest.approx(lp, abs=fp_tol(lp)), (diff, moved, ls, lp)


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("policies", [{"mixed_precision": "bf16"}, {"cpu_offload": True}])
def test_fsdp2_mixed_precision_and_offload_run_on_cuda(policies):
    diff, moved, ls, lp = _one_rank_fsdp("cuda", **policies)
    if policies.get("mixed_precision") == "bf16":  # bf16 forward and backward: rounding at bf16's eps
        assert diff < moved and ls == pytest.approx(lp, abs=fp_tol(lp, dtype=torch.bfloat16)), (diff, moved, ls, lp)
    else:
        assert diff < update_tol(moved) and ls == pytest.approx(lp, abs=fp_tol(lp)), (diff, moved, ls, lp)


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("dtype,tol", [(None, 1e-4), (torch.bfloat16, 0.15)])
def test_engine_logprobs_agree_with_the_trainer_on_cuda(dtype, tol):
    from satseq.models.tiny import build_tiny_model
    from satseq.rollout.hf_engine import HFEngine
    from satseq.rollout.logprobs import response_logprobs
    from satseq.rollout.types import SamplingParams

    model, tok = build_tiny_model(seed=1)
    model = model.to("cuda").eval()
    prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in ("12+7=", "3+45=", "8+8=", "100+1=")]
    gens = HFEngine(tok, device="cuda", dtype=dtype).generate(model, prompts, SamplingParams(max_new_tokens=12),
                                                              torch.Generator().manual_seed(0))
    lp, mask = response_logprobs(model, prompts, [g.response_ids for g in gens], tok.pad_token_id, device="cuda")
    gap = max(abs(float(lp[i, t]) - g.logprobs[t]) for i, g in enumerate(gens) for t in range(len(g.response_ids)))
    assert gap < tol, gap
