"""Sharded training inside an agent with FSDP2 (``trainer.strategy=fsdp2``, docs/scale.md).

Under torchrun, ``trainer.strategy=replicate`` (:mod:`satseq.scale.ddp`) keeps every agent whole on
every rank and all-reduces gradients; ``fsdp2`` shards each agent's model with torch's own
``torch.distributed.fsdp.fully_shard``: every decoder layer, then the root (the causal LM: embeddings,
final norm, LM head), over an explicit 1-D mesh (``init_device_mesh("cpu"|"cuda", (world,))``: on a
machine with CUDA and a Gloo group the default mesh could pick CUDA, pytorch#132471). Each rank then
holds 1/N of the parameters, of their gradients and of the AdamW moments; a layer's parameters are
all-gathered for its forward and backward and freed after, and the gradients reduce-scattered.

What stays as under ``replicate``: every rank builds the same run and takes the same decisions; the
trainer's forward passes split a turn batch's rows over the ranks (:meth:`satseq.scale.fsdp2.Fsdp2.logprobs`),
the per-token results are all-gathered, every rank computes the full batch's loss and its backward
reaches the parameters through its own rows only. What differs:

* **the same forwards on every rank** — each forward of a sharded module all-gathers, so every rank
  must run as many: a rank runs its rows in as many chunks as the rank with the most rows, a rank
  with fewer runs :func:`dummy_forward` (a one-token row whose output enters the loss times zero);
  the trainer forward goes through the root module (the shared-prefix path calls the decoder
  directly, which FSDP2 cannot unshard, so each row runs its own prompt);
* **gradients** — FSDP2 reduce-scatters the *mean* of the ranks' gradients; the backward is of
  ``N × loss`` (:func:`backward_scale`), so each shard holds the *sum*, the 1-rank gradient (a custom
  divide factor of 1 needs NCCL's PREMUL_SUM, which Gloo lacks);
* **clipping** — the norm over all shards (:func:`clip_grad_norm`, ``get_total_norm`` →
  ``full_tensor`` → ``clip_grads_with_norm_``, as torchtitan does);
* **the rollout engine** gets full weights: a plain copy of each agent's model (made before
  sharding) into which every parameter is gathered one tensor at a time (``full_tensor()``) before
  every rollout (:class:`GatheredRollouts`); the engine generates from that copy with no collective,
  so ranks that roll out different problems never wait on each other. The same copy is what rank 0
  writes the HF checkpoints and ``agent_k_stage_N.pt`` from (:func:`export_pool`);
* **trainer state** — through ``torch.distributed.checkpoint`` (:mod:`satseq.scale.fsdp_checkpoint`).

The line search of SAT-Seq's KL check (θ_cur + α^j Δ) and the optimizer step work on the sharded
parameters as they are: element-wise, on each rank's shard. On one process (no torchrun) nothing is
sharded and only the checkpoint format differs. GPU only: ``trainer.fsdp_mixed_precision=bf16``
(bf16 parameters in forward and backward, fp32 gradient reduction: ``MixedPrecisionPolicy``) and
``trainer.fsdp_cpu_offload`` (parameters, gradients and optimizer states in CPU memory:
``CPUOffloadPolicy``); both ran once, on one NCCL rank of one H200 (the GPU check, docs/scale.md), never on
several GPUs.
"""
from __future__ import annotations

import copy

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from satseq.errors import ConfigError
from satseq.scale import ddp


# ---------------------------------------------------------------------------- the layout
def check_layout(cfg, world: int, cuda_devices: int | None = None) -> None:
    """One-line errors for layouts that cannot run: more ranks than a stage's prompts (a rank would
    have nothing to roll out or train on), ``fsdp2`` with the Ray backend, the GPU-only FSDP options
    on a CPU device, more ranks on a node than it has GPUs."""
    t = cfg.trainer
    if world > 1 and t.train_batch_size < world:
        raise ConfigError(f"config key 'trainer.train_batch_size': {t.train_batch_size} prompts per stage cannot be "
                          f"split over {world} ranks (each needs at least one): raise it or launch fewer ranks")
    if t.strategy == "fsdp2" and t.backend != "local":
        raise ConfigError("config key 'trainer.strategy': fsdp2 shards an agent over torchrun's ranks and runs with "
                          "trainer.backend=local (a Ray actor holds its agent whole)")
    cuda = cfg.device.startswith("cuda") or (cfg.device == "auto" and torch.cuda.is_available())
    for key, on in (("fsdp_mixed_precision", t.fsdp_mixed_precision != "off"), ("fsdp_cpu_offload", t.fsdp_cpu_offload)):
        if on and t.strategy != "fsdp2":
            raise ConfigError(f"config key 'trainer.{key}': an FSDP2 option; set trainer.strategy=fsdp2")
        if on and not cuda:
            raise ConfigError(f"config key 'trainer.{key}': for CUDA devices (device={cfg.device})")
    if cuda and world > 1:
        import os

        have = torch.cuda.device_count() if cuda_devices is None else cuda_devices
        local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        if local > have:
            raise ConfigError(f"config key 'device': torchrun started {local} ranks on this node, which has {have} "
                              f"GPU(s): one rank per GPU (--nproc_per_node {have})")


def is_sharded(model) -> bool:
    """Whether ``model`` (or the transformers model under a peft wrapper) is an FSDP2 module."""
    from torch.distributed.fsdp import FSDPModule

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return isinstance(base, FSDPModule)


def has_dtensors(params) -> bool:
    return any(isinstance(p, DTensor) for p in params)


def decoder_layers(model):
    """The decoder-layer list each of which becomes one FSDP unit (``model.model.layers`` for
    Llama, Qwen2, Qwen3, Mistral); a one-line error naming ``trainer.strategy`` otherwise."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder = base.get_decoder() if hasattr(base, "get_decoder") else None
    layers = getattr(decoder, "layers", None)
    if not isinstance(layers, torch.nn.ModuleList) or not len(layers):
        raise ConfigError(f"config key 'trainer.strategy': fsdp2 shards each decoder layer; {type(base).__name__} "
                          "has no decoder.layers")
    return base, layers


def device_mesh(device: str):
    """The 1-D mesh over every rank, on this run's device type (explicit: pytorch#132471)."""
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cuda" if str(device).startswith("cuda") else "cpu", (ddp.world_size(),))


def _policies(mixed_precision: str, cpu_offload: bool) -> dict:
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy

    mp = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
          if mixed_precision == "bf16" else MixedPrecisionPolicy())
    return {"mp_policy": mp, "offload_policy": CPUOffloadPolicy() if cpu_offload else OffloadPolicy()}


def shard_model(model, mesh, *, mixed_precision: str = "off", cpu_offload: bool = False):
    """``fully_shard`` each decoder layer, then the root (the causal LM, under a peft wrapper for LoRA)."""
    from torch.distributed.fsdp import fully_shard

    base, layers = decoder_layers(model)
    kw = {"mesh": mesh, **_policies(mixed_precision, cpu_offload)}
    for layer in layers:
        fully_shard(layer, **kw)
    # the root too is resharded after each forward (its default keeps it gathered): between passes every
    # parameter is its sharded DTensor, the one the optimizer, the checkpoint and the rollout sync see
    fully_shard(base, reshard_after_forward=True, **kw)
    return model


def sharded_copy(model, mesh, **policies):
    """A frozen copy of a sharded model (FSDP2 refuses ``deepcopy``): the same architecture built
    on the meta device, sharded the same way, each rank's shards and the buffers copied. Full
    fine-tuning's reference policy (:meth:`satseq.models.agents.AgentPool.keep_reference`)."""
    with torch.device("meta"):
        twin = type(model)._from_config(model.config)
    shard_model(twin, mesh, **policies)
    twin.to_empty(device=next(model.parameters()).to_local().device)
    with torch.no_grad():
        for (n, p), (n2, q) in zip(model.named_parameters(), twin.named_parameters()):
            assert n == n2, (n, n2)
            q.to_local().copy_(p.to_local())
        for (_, b), (_, c) in zip(model.named_buffers(), twin.named_buffers()):
            c.copy_(b)
    for p in twin.parameters():
        p.requires_grad_(False)
    return twin.eval()


# ---------------------------------------------------------------------------- the trainer's passes
def backward_scale() -> int:
    """The factor of the loss whose backward gives each shard the *sum* of the ranks' gradients:
    FSDP2 reduce-scatters their mean."""
    return ddp.world_size()


def clip_grad_norm(params, max_norm: float) -> float:
    """Clip by the global norm of the gradients of every shard; returns that norm."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    total = torch.nn.utils.get_total_norm(grads, 2.0)
    if isinstance(total, DTensor):
        total = total.full_tensor()  # the partial norms of the shards, reduced over ranks
    torch.nn.utils.clip_grads_with_norm_([p for p in params if p.grad is not None], max_norm, total)
    return float(total)


def dummy_forward(model, pad_id: int, device, grad: bool) -> torch.Tensor:
    """A one-token forward of ``model``, for a rank with fewer rows than another (every rank must
    run each sharded module's forward as often); its zero-weighted sum, to add to the rank's result
    so that the backward runs through it too (its post-backward reduce-scatter is a collective)."""
    ids = torch.tensor([[int(pad_id)]], device=device)
    ctx = torch.enable_grad() if grad else torch.no_grad()
    with ctx:
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False).logits
        return out.float().sum() * 0.0


def chunks_per_rank(blocks: list[list[int]], chunk: int) -> int:
    """The number of forwards every rank runs for one pass: the largest rank's rows in ``chunk``s."""
    most = max((len(b) for b in blocks), default=0)
    return max(1, -(-most // max(1, chunk)))


# ---------------------------------------------------------------------------- rollout weights
class GatheredRollouts:
    """The rollout engine of a sharded run: generation with full weights, gathered per tensor.

    ``replica`` is an :class:`~satseq.models.agents.AgentPool` of plain copies of the agents'
    models, made before sharding. :meth:`sync_weights` (a collective: every rank calls it, before
    every rollout — :meth:`satseq.scale.replicate.Replicate.rollout`, the held-out evaluation, the saved
    checkpoints) copies each trainable parameter into the replica with ``full_tensor()``, one tensor
    at a time (a full state dict never exists). ``generate(model, ...)`` generates with the replica
    of the agent ``model`` acts for, through the wrapped engine (a :class:`~satseq.rollout.engine.RolloutEngine`:
    ``generate`` is all a workflow asks of it)."""

    def __init__(self, engine, pool, replica):
        self.engine, self.pool, self.replica = engine, pool, replica
        self._full = {id(pool.module(n)): n for n in pool.names} if pool.mode == "full" else {}

    @torch.no_grad()
    def sync_weights(self) -> None:
        for name in self.pool.names:
            mine = self.replica.named_trainable(name)
            for n, p in self.pool.named_trainable(name).items():
                t = p.detach()
                if isinstance(t, DTensor):
                    if t.device.type == "cpu" and dist.get_backend() == "nccl":  # CPU offload on GPUs
                        t = t.to(torch.device("cuda", torch.cuda.current_device()))
                    t = t.full_tensor()
                mine[n].copy_(t)

    def _agent_of(self, model) -> str:
        if self.pool.mode == "full":
            return self._full[id(model)]
        active = model.active_adapter
        return active[0] if isinstance(active, (list, tuple)) else active

    def generate(self, model, prompts, sampling, generator=None):
        return self.engine.generate(self.replica.module(self._agent_of(model)), prompts, sampling, generator)


def sync_rollout(engine) -> None:
    """Gather the current weights into the rollout engine (a collective under fsdp2; else nothing)."""
    if isinstance(engine, GatheredRollouts):
        engine.sync_weights()


def export_pool(rt):
    """The pool to write HF checkpoints and ``.pt`` exports from: under fsdp2 the engine's full copy,
    gathered now (every rank calls this; rank 0 writes), else the run's own pool."""
    if isinstance(rt.engine, GatheredRollouts):
        rt.engine.sync_weights()
        return rt.engine.replica
    return rt.pool


def _replica(pool):
    from satseq.models.agents import AgentPool

    if pool.mode == "full":
        rep = AgentPool.full(pool.names, [copy.deepcopy(m) for m in pool.root_modules()], pool.tokenizer,
                             device=pool.device)
    else:
        rep = AgentPool(pool.names, pool.tokenizer, mode="lora", peft_model=copy.deepcopy(pool.root_modules()[0]),
                        device=pool.device)
    for m in rep.root_modules():
        m.eval()
        for p in m.parameters():
            p.requires_grad_(False)
    return rep


def apply(cfg, rt) -> None:
    """``trainer.strategy=fsdp2`` under torchrun: shard every agent's model over the ranks, route the
    rollouts through full-weight copies, and make full fine-tuning's references sharded copies.
    On one process: nothing (only the checkpoint format differs)."""
    if not ddp.is_distributed():
        return
    pool = rt.pool
    for m in pool.root_modules():
        decoder_layers(m)  # the one-line error before anything is copied
    replica = _replica(pool)
    mesh = device_mesh(rt.device)
    policies = {"mixed_precision": cfg.trainer.fsdp_mixed_precision, "cpu_offload": cfg.trainer.fsdp_cpu_offload}
    for m in pool.root_modules():
        shard_model(m, mesh, **policies)
    pool.module_copier = lambda model: sharded_copy(model, mesh, **policies)  # the pool's hook for reference copies
    rt.engine = GatheredRollouts(rt.engine, pool, replica)  # the rollouts' full weights (update_weights syncs them)
