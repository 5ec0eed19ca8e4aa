"""``fsdp2``: each agent sharded over torchrun's ranks with torch's FSDP2 (``fully_shard``), the
trainer state through torch.distributed.checkpoint (docs/scale.md).

Everything :class:`~satseq.scale.replicate.Replicate` does (rollouts and rows split over the ranks),
and what sharding changes (:mod:`satseq.scale.fsdp` holds the pieces and the reasons):

* :meth:`Fsdp2.prepare` shards every agent's model (each decoder layer, then the root) and routes
  the rollouts through plain full-weight copies (:class:`~satseq.scale.fsdp.GatheredRollouts`);
* :meth:`Fsdp2.update_weights` gathers the current weights into those copies, one tensor at a time,
  before every rollout, held-out evaluation and export (a collective: every rank calls it);
* :meth:`Fsdp2.logprobs` runs the same number of forwards on every rank (each all-gathers), a rank
  short of rows running a zero-weighted one-token forward;
* :meth:`Fsdp2.backward` backpropagates N × the loss (FSDP2 reduce-scatters the mean; × N: the sum)
  and clips by the norm over every shard;
* :meth:`Fsdp2.save_trainer_state` / :meth:`load_trainer_state`: weights and optimizer states as
  DCP shards, every rank writing its own, resumable on any number of ranks.

On one process nothing is sharded and only the checkpoint format differs.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import torch

from satseq.errors import SatseqError
from satseq.registry import register_strategy
from satseq.scale import ddp, fsdp, fsdp_checkpoint
from satseq.scale.replicate import Replicate


@register_strategy
class Fsdp2(Replicate):
    name = "fsdp2"

    def prepare(self, cfg, rt) -> None:
        fsdp.apply(cfg, rt)

    def update_weights(self, engine) -> None:
        fsdp.sync_rollout(engine)

    def export_pool(self, rt):
        return fsdp.export_pool(rt)  # every rank gathers the full weights, rank 0 writes

    # ------------------------------------------------------------------ the trainer's passes
    def logprobs(self, model, batch, compute, *, chunk: int, pad_id: int, device, grad: bool, need_logits: bool):
        """Each forward of a sharded module all-gathers its layers' shards, so every rank runs as many:
        its rows in as many chunks as the rank with the most rows needs, a one-token forward for each
        chunk it has no row for, whose zero-weighted output joins the result so that the backward (and
        its reduce-scatter) runs on every rank too."""
        if not (ddp.is_distributed() and fsdp.is_sharded(model)):
            return super().logprobs(model, batch, compute, chunk=chunk, pad_id=pad_id, device=device, grad=grad,
                                    need_logits=need_logits)
        keys = batch.prompts
        blocks = ddp.rank_rows(len(batch), keys)
        mine = blocks[ddp.rank()]
        n_chunks = fsdp.chunks_per_rank(blocks, chunk)
        size = max(1, -(-len(mine) // n_chunks))
        parts, zero = [], None
        for c in range(n_chunks):
            rows = mine[c * size:(c + 1) * size]
            if rows:
                parts.append(compute(batch.select(torch.tensor(rows, dtype=torch.long)), len(rows)))
            else:
                z = fsdp.dummy_forward(model, pad_id, device, grad)
                zero = z if zero is None else zero + z
        if parts:
            width = max(p[0].shape[1] for p in parts)
            out = [torch.cat([torch.nn.functional.pad(p[i], (0, width - p[i].shape[1]) if i < 2 else
                                                      (0, 0, 0, width - p[i].shape[1])) for p in parts])
                   for i in range(len(parts[0]))]
        else:
            out = [torch.zeros((0, 0), device=device), torch.zeros((0, 0), dtype=torch.long, device=device),
                   torch.zeros((0, 0, 0), device=device)][: 3 if need_logits else 2]
        full = [ddp.share_rows(x, len(batch), keys) for x in out]
        if zero is not None and grad:
            full = [x + zero if x.is_floating_point() else x for x in full]
        return tuple(full)

    def backward(self, loss: torch.Tensor, params: list, grad_clip: float) -> None:
        if not fsdp.has_dtensors(params):
            return super().backward(loss, params, grad_clip)
        (loss * fsdp.backward_scale()).backward()  # FSDP2 averages over ranks; × N: the sum
        if grad_clip > 0:
            fsdp.clip_grad_norm(params, grad_clip)

    # ------------------------------------------------------------------ checkpoints
    def save_trainer_state(self, run_dir, *, stage: int, pool, extra) -> None:
        """Every rank writes its shards into rank 0's temporary directory, rank 0 the rest; the
        directory is swapped in once every rank's shards are written."""
        from satseq.checkpoint import STATE_DIR, swap_in_dir, with_global_rng

        run_dir, tmp, extra = Path(run_dir), None, extra()  # every rank: the updater's state dict
        if ddp.is_main():
            run_dir.mkdir(parents=True, exist_ok=True)
            tmp = tempfile.mkdtemp(prefix=f".{STATE_DIR}.", dir=run_dir)
        tmp = Path(ddp.all_gather(tmp)[0])  # rank 0's directory, for every rank's shards
        try:
            keys = fsdp_checkpoint.save(tmp / fsdp_checkpoint.DCP_DIR, pool)
            if ddp.is_main():
                extra = dict(extra, updater=fsdp_checkpoint.strip_optimizers(extra.get("updater"), pool))
                torch.save(with_global_rng(stage, {**extra, "dcp_optimizers": keys}), tmp / "state.pt")
            ddp.barrier()  # every rank's shards are written before the directory is swapped in
            if ddp.is_main():
                swap_in_dir(tmp, run_dir / STATE_DIR)
            ddp.barrier()
        except BaseException:
            if ddp.is_main():
                shutil.rmtree(tmp, ignore_errors=True)
            raise

    def load_trainer_state(self, run_dir, pool) -> dict | None:
        from satseq.checkpoint import load_trainer_state

        def read_shards(d: Path, state: dict) -> None:
            fsdp_checkpoint.load(d / fsdp_checkpoint.DCP_DIR, pool, state.get("dcp_optimizers"))
            state["updater"] = fsdp_checkpoint.fill_optimizers(state.get("updater"), pool)

        def check_plain(d: Path) -> None:
            if _sharded(pool):
                raise SatseqError(f"{d}: written with trainer.strategy=replicate; resume it with that strategy "
                                  "(or start a new run_name)")

        return load_trainer_state(run_dir, pool, read_shards=read_shards, check_plain=check_plain)


def _sharded(pool) -> bool:
    """Whether ``pool``'s models hold FSDP2-sharded parameters."""
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for n in pool.names for p in pool.parameters(n))
