"""Per-rank memory of a full fine-tuning update with AdamW: 1 rank, 2 ranks ``replicate``, 2 ranks ``fsdp2``.

    python bench/fsdp_memory.py [--out /tmp/fsdp_memory] [--rows 4] [--prompt 32] [--response 32]

The model is SmolLM2-135M's shape (Llama: 30 layers, hidden 576, FFN 1536, 9 heads / 3 KV heads,
vocab 49,152, tied embeddings; 134.5 M parameters), randomly initialised: memory does not depend on
the values. Each configuration is a fresh process tree (``python -m torch.distributed.run`` for 2 ranks,
Gloo, one thread per rank) running satseq's own trainer path: :func:`satseq.scale.fsdp.shard_model`
for fsdp2, then two updates of ``batch_logprobs(grad=True)`` → a token-mean loss →
:func:`satseq.update.loop.optimizer_step` (the gradient all-reduce for replicate, FSDP2's
reduce-scatter for fsdp2, clipping at 1.0, AdamW) on ``--rows`` rows split over the ranks. The first
update creates the AdamW moments; the second is measured. Per rank:

* **params + grads + AdamW** — the bytes of the tensors this rank holds after the measured update:
  its parameters (its shards under fsdp2), their gradients and both AdamW moments (the sizes of the
  storages behind them, each counted once: padding of uneven shards and shared buffers included);
* **peak RSS during the update** — the process's resident-set high-water mark (``VmHWM``, reset
  through ``/proc/self/clear_refs`` just before the update), which also holds activations, the
  all-gathered layers, the Python interpreter and torch (about 0.3 GB) — and, for fsdp2, nothing of the
  full model it was built from (``release_freed_memory``: freed blocks go back to the OS).

``fsdp2+rollout copy`` is fsdp2 plus what a satseq training run under fsdp2 also keeps on every rank:
the rollout engine's full-weight copy of the model (:class:`satseq.scale.fsdp.GatheredRollouts`), fp32.

The table is printed in Markdown and written to ``OUT/fsdp_memory.json``; the reported figure of each
configuration is the largest over its ranks.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

SMOLLM2 = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
               num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048, rms_norm_eps=1e-5,
               rope_theta=100000.0, tie_word_embeddings=True)
CONFIGS = [(1, "replicate"), (2, "replicate"), (2, "fsdp2"), (2, "fsdp2+rollout copy")]


def _status_kb(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def _bytes(tensors) -> int:
    from torch.distributed.tensor import DTensor

    storages = {}  # by storage: a shard's local tensor can be a view of a larger buffer (counted once)
    for t in tensors:
        if t is None:
            continue
        t = t.to_local() if isinstance(t, DTensor) else t
        st = t.untyped_storage()
        storages[st.data_ptr()] = st.nbytes()
    return sum(storages.values())


def worker(a) -> None:
    """One rank of one configuration (under torchrun for 2 ranks); writes its figures as JSON."""
    import torch
    import torch.distributed as dist
    from transformers import LlamaConfig, LlamaForCausalLM

    from satseq.scale import ddp, fsdp
    from satseq.update.batch import TurnBatch, batch_logprobs
    from satseq.update.loop import optimizer_step
    from satseq.utils.memory import release_freed_memory

    release_freed_memory()
    torch.set_num_threads(1)
    if ddp.launched_with_ranks() > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**SMOLLM2))
    n_params = sum(p.numel() for p in model.parameters())
    rollout_copy = None
    if a.strategy.startswith("fsdp2") and ddp.is_distributed():
        if a.strategy != "fsdp2":  # what a satseq run also holds: the rollout engine's full copy (GatheredRollouts)
            import copy

            rollout_copy = copy.deepcopy(model).requires_grad_(False)
        fsdp.shard_model(model, fsdp.device_mesh("cpu"))
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=1e-5)
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, SMOLLM2["vocab_size"], (a.prompt,), generator=g).tolist() for _ in range(a.rows)]
    responses = [torch.randint(0, SMOLLM2["vocab_size"], (a.response,), generator=g).tolist() for _ in range(a.rows)]
    batch = TurnBatch(prompts, responses, torch.arange(a.rows), torch.zeros(a.rows), [[0.0] * a.response] * a.rows)

    def update() -> None:
        with torch.enable_grad():
            model.train()
            lp, mask = batch_logprobs(model, batch, 0, temperature=1.0, device="cpu", grad=True, chunk=a.rows)
            loss = -(lp * mask).sum() / mask.sum()
            optimizer_step(opt, loss, params, 1.0)

    update()  # creates the AdamW moments
    ddp.barrier()
    rss_before = _status_kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    import time

    t0 = time.perf_counter()
    update()
    seconds = time.perf_counter() - t0
    peak = _status_kb("VmHWM")
    states = [v for st in opt.state.values() for k, v in st.items() if k in ("exp_avg", "exp_avg_sq")]
    row = {"ranks": ddp.world_size(), "strategy": a.strategy, "rank": ddp.rank(), "params": n_params,
           "param_bytes": _bytes(params), "grad_bytes": _bytes(p.grad for p in params),
           "adam_bytes": _bytes(states), "rss_before_update_kb": rss_before, "peak_rss_update_kb": peak,
           "update_seconds": seconds}
    row["pga_bytes"] = row["param_bytes"] + row["grad_bytes"] + row["adam_bytes"]
    row["copy_bytes"] = _bytes(rollout_copy.parameters()) if rollout_copy is not None else 0
    out = Path(a.out) / f"{a.strategy.replace(' ', '_')}_{ddp.world_size()}_{ddp.rank()}.json"
    out.write_text(json.dumps(row))
    ddp.barrier()
    ddp.teardown()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="/tmp/fsdp_memory")
    ap.add_argument("--rows", type=int, default=4, help="rows of the update batch (split over the ranks)")
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--response", type=int, default=32)
    ap.add_argument("--strategy", default="replicate")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    if a.worker:
        return worker(a)
    rows = []
    for ranks, strategy in CONFIGS:
        launch = [sys.executable] if ranks == 1 else [
            sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(ranks), "--master_addr",
            "127.0.0.1", "--master_port", str(_free_port())]
        cmd = [*launch, __file__, "--worker", "--strategy", strategy, "--out", a.out, "--rows", str(a.rows),
               "--prompt", str(a.prompt), "--response", str(a.response)]
        r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
        if r.returncode != 0:
            sys.exit(f"bench/fsdp_memory.py: {ranks} rank(s) {strategy} failed: {r.stderr.strip()[-2000:]}")
        per_rank = [json.loads((Path(a.out) / f"{strategy.replace(' ', '_')}_{ranks}_{k}.json").read_text())
                    for k in range(ranks)]
        rows.append({"ranks": ranks, "strategy": strategy, "params": per_rank[0]["params"],
                     **{k: max(x[k] for x in per_rank) for k in ("param_bytes", "grad_bytes", "adam_bytes", "pga_bytes",
                                                                  "copy_bytes", "rss_before_update_kb", "peak_rss_update_kb",
                                                                  "update_seconds")}})
    base = rows[0]
    gb = 1e9
    print(f"SmolLM2-135M-shaped Llama ({base['params'] / 1e6:.1f} M parameters), full fine-tuning, AdamW, "
          f"{a.rows} rows × ({a.prompt} + {a.response}) tokens per update, fp32, Gloo, 1 thread per rank; "
          "per rank, the largest over ranks\n")
    print("| ranks | strategy | params | grads | AdamW moments | params + grads + AdamW | × 1 rank | rollout copy | "
          "peak RSS during the update | × 1 rank |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['ranks']} | {r['strategy']} | {r['param_bytes'] / gb:.3f} GB | {r['grad_bytes'] / gb:.3f} GB | "
              f"{r['adam_bytes'] / gb:.3f} GB | {r['pga_bytes'] / gb:.3f} GB | {r['pga_bytes'] / base['pga_bytes']:.2f} | "
              f"{r['copy_bytes'] / gb:.3f} GB | "
              f"{r['peak_rss_update_kb'] * 1024 / gb:.2f} GB | {r['peak_rss_update_kb'] / base['peak_rss_update_kb']:.2f} |")
    (Path(a.out) / "fsdp_memory.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
