"""Data parallelism inside an agent with ``torch.distributed`` (docs/scale.md).

Launched by ``torchrun --nproc_per_node N -m satseq.cli train ...``: every rank builds the same run
(same seed, same generator, same sampler), so every rank makes the same decisions; the work is split
and the results are exchanged with torch.distributed collectives (Gloo on CPU, NCCL on GPU):

* rollouts — the stage's problems in contiguous blocks, one per rank, their episodes all-gathered
  (:meth:`satseq.scale.replicate.Replicate.rollout`);
* the trainer's forward passes — the rows of every turn batch, ordered by prompt, in contiguous
  blocks over the ranks (:func:`owned_rows`: a group's rows stay on one rank, which runs their
  shared prompt once); the per-token results are all-gathered into the full batch, a rank's own rows
  kept live (:func:`share_rows`), so the loss of the full batch is computed identically everywhere
  while each rank's backward reaches the parameters only through its own rows;
* gradients — summed over ranks (:func:`all_reduce_grads`) before clipping and the optimizer step;
* outputs — rank 0 writes them (:func:`is_main`); the trainer state keeps every rank's torch RNG
  (:func:`rng_states`: dropout masks are drawn per rank).

Why the sum is the 1-rank gradient: the loss is ``L(ℓ_1, …, ℓ_B)`` of the batch's per-row log-probs
(whatever the aggregation: seq-mean-token-mean, token sums over a constant, a KL term), so
``∇θ L = Σ_b ∂L/∂ℓ_b · ∇θ ℓ_b``; rank r's backward gives the terms of its rows, and the all-reduced
sum over ranks is the whole sum. No per-loss normaliser has to be re-derived.

Every helper is a no-op on one process (no process group): the local path is unchanged.
"""
from __future__ import annotations

import os
from contextlib import contextmanager

import torch
import torch.distributed as dist

from satseq.strategy import launched_ranks  # WORLD_SIZE: the strategy layer owns it


# ---------------------------------------------------------------------------- who am I
def is_distributed() -> bool:
    """A process group with more than one rank is up."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def rank() -> int:
    """This process's rank (``RANK`` from the launcher before the group is up; 0 alone)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", "0"))


def is_main() -> bool:
    """Rank 0: the one that writes outputs and talks to the console."""
    return rank() == 0


# ---------------------------------------------------------------------------- the process group
def setup(device: str) -> bool:
    """Join the process group torchrun describes (``WORLD_SIZE`` > 1): NCCL for a CUDA ``device``
    (each rank on GPU ``LOCAL_RANK``), Gloo otherwise. Returns whether this call created it."""
    if launched_ranks() <= 1 or not dist.is_available() or dist.is_initialized():
        return False
    cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend="nccl" if cuda else "gloo")
    return True


def teardown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


@contextmanager
def process_group(device: str):
    """:func:`setup` on entry, and on exit the group torn down if this block created it."""
    created = setup(device)
    try:
        yield
    finally:
        if created:
            teardown()


def barrier() -> None:
    if is_distributed():
        dist.barrier()


@contextmanager
def main_first():
    """Rank 0 runs the block first (it may build and write shared files, e.g. the warm start), then
    the others run it and find them."""
    if is_distributed() and not is_main():
        dist.barrier()
    try:
        yield
    finally:
        if is_distributed() and is_main():
            dist.barrier()


# ---------------------------------------------------------------------------- collectives
def all_gather(obj) -> list:
    """Every rank's ``obj`` (picklable), in rank order; ``[obj]`` alone."""
    if not is_distributed():
        return [obj]
    out = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def all_reduce_sum(values):
    """Element-wise sum over ranks of a list of floats (returned as a list) or a tensor."""
    if not is_distributed():
        return values
    as_list = not isinstance(values, torch.Tensor)
    t = torch.tensor(values, dtype=torch.float64) if as_list else values.clone()
    t = t.to(_comm_device()) if as_list else t
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.cpu().tolist() if as_list else t


def _comm_device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def all_reduce_grads(params) -> None:
    """``p.grad`` ← Σ_ranks ``p.grad`` for every parameter (one flat all-reduce per dtype). A
    parameter without a gradient on a rank contributes zeros; one without a gradient on every rank
    keeps ``grad=None`` (the optimizer skips it, as it would on one process)."""
    if not is_distributed():
        return
    params = [p for p in params if p.requires_grad]
    if not params:
        return
    dev = params[0].device
    has = torch.tensor([p.grad is not None for p in params], dtype=torch.float32, device=dev)
    dist.all_reduce(has)
    for dtype in {p.dtype for p in params}:
        group = [p for p in params if p.dtype == dtype]
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in group])
        dist.all_reduce(flat)
        offset = 0
        for p in group:
            g = flat[offset: offset + p.numel()].view_as(p)
            offset += p.numel()
            if p.grad is None:
                p.grad = g.clone()
            else:
                p.grad.copy_(g)
    for p, h in zip(params, has.tolist()):
        if h == 0:
            p.grad = None


def rng_states() -> list | None:
    """Every rank's torch RNG state, in rank order (None on one process). Ranks draw different
    numbers from it (dropout masks of their own rows), so the trainer state keeps each one."""
    return all_gather(torch.get_rng_state()) if is_distributed() else None


def restore_rng(states: list | None) -> None:
    """This rank's entry of :func:`rng_states` (kept only when the run resumes with as many ranks)."""
    if states is not None and is_distributed() and len(states) == world_size():
        torch.set_rng_state(states[rank()])


# ---------------------------------------------------------------------------- rows of a batch
def shard_bounds(n: int) -> tuple[int, int]:
    """This rank's contiguous block ``[lo, hi)`` of ``n`` items (sizes differ by at most one)."""
    w, r = world_size(), rank()
    base, extra = divmod(n, w)
    lo = r * base + min(r, extra)
    return lo, lo + base + (1 if r < extra else 0)


def rank_rows(n: int, keys: list | None = None) -> list[list[int]]:
    """Every rank's rows of an ``n``-row batch: the rows in the order of ``keys`` (a row's prompt: rows
    that share a prompt prefix then sit on one rank, where the trainer's forward runs it once,
    :mod:`satseq.rollout.prefix_sharing`), or in batch order without keys, cut into contiguous blocks
    whose sizes differ by at most one."""
    order = sorted(range(n), key=lambda i: keys[i]) if keys is not None else list(range(n))
    w, blocks, lo = world_size(), [], 0
    base, extra = divmod(n, w)
    for r in range(w):
        hi = lo + base + (1 if r < extra else 0)
        blocks.append(order[lo:hi])
        lo = hi
    return blocks


def owned_rows(n: int, keys: list | None = None) -> list[int]:
    """The rows of an ``n``-row batch this rank computes (:func:`rank_rows`)."""
    return rank_rows(n, keys)[rank()] if is_distributed() else list(range(n))


def gather_rows(local: torch.Tensor, n: int, keys: list | None = None) -> torch.Tensor:
    """The full ``[n, …]`` tensor from every rank's :func:`owned_rows` ``local`` ``[k_r, …]`` (the same
    ``keys`` on every rank); trailing dimensions that differ between ranks (the response width) are
    zero-padded to the largest, as :func:`satseq.update.batch.batch_logprobs` pads its chunks."""
    if not is_distributed():
        return local
    w = world_size()
    shape = torch.tensor(list(local.shape), dtype=torch.long, device=local.device)
    shapes = [torch.zeros_like(shape) for _ in range(w)]
    dist.all_gather(shapes, shape)
    big = torch.stack(shapes).max(dim=0).values.tolist()
    bufs = [local.new_zeros(big) for _ in range(w)]
    dist.all_gather(bufs, _pad_to(local, big))
    out = local.new_zeros([n, *big[1:]])
    for rows, buf, s in zip(rank_rows(n, keys), bufs, shapes):
        if rows:
            out[torch.tensor(rows, dtype=torch.long, device=out.device)] = buf[: int(s[0])]
    return out


def share_rows(local: torch.Tensor, n: int, keys: list | None = None) -> torch.Tensor:
    """:func:`gather_rows`, with this rank's own rows left connected to its autograd graph when
    ``local`` requires grad (the other ranks' rows are constants here)."""
    if not is_distributed() or not local.requires_grad:
        return gather_rows(local.detach() if is_distributed() else local, n, keys)
    full = gather_rows(local.detach(), n, keys)
    own = torch.tensor(owned_rows(n, keys), dtype=torch.long, device=local.device)
    return full.index_put((own,), _pad_to(local, [len(own), *full.shape[1:]]))


def _pad_to(x: torch.Tensor, shape) -> torch.Tensor:
    pad = []
    for have, want in zip(reversed(x.shape), reversed(list(shape))):
        pad += [0, int(want) - int(have)]
    return torch.nn.functional.pad(x, pad) if any(pad) else x
