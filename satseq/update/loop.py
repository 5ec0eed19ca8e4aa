"""What every updater shares: one optimizer factory, one reference-model helper, one mini-batch ×
epoch loop, one optimizer step, one sampling-temperature rule.

An updater (the contract, :class:`Updater`) is an object with ``update(stage, episodes) -> metrics``
and ``state_dict()`` / ``load_state_dict()`` (optimizer states and anything else that must survive a
resume). Written with these helpers, an updater's ``update`` is the method's formula and nothing else::

    opt = make_optimizer(pool, agent, lr, cfg)
    ref_lp = reference_logprobs(pool, agent, batch, temperature=t, device=d)

    def step_loss(idx, mb, lp, mask, logdist):      # one mini-batch's loss, from its grad forward
        loss, metrics = loss_fn(lp, old_lp[idx], mb.advantages, mask, ...)
        return loss

    losses = fit_minibatches(pool, agent, model, opt, batch, step_loss, epochs=epochs, size=mini_batch_size,
                             generator=generator, temperature=t, device=d, grad_clip=grad_clip)

:func:`fit_minibatches` is the loop itself: for each epoch, for each shuffled mini-batch
(:func:`minibatches`), the grad forward ``batch_logprobs(model, mb, ..., grad=True, chunk=len(mb))``,
``step_loss`` and one :func:`optimizer_step`.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, Optional, Protocol

import torch

from satseq.strategy import current as current_strategy
from satseq.update.batch import TurnBatch, batch_logprobs, minibatch_indices


class Updater(Protocol):
    def update(self, stage: int, episodes: list) -> dict: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


class AgentSteps(Protocol):
    """Where a block-coordinate updater's per-agent steps run, when not in its own process: the
    updater takes it as ``rt.agent_steps`` (``trainer.backend=ray``: each step in the actor hosting the
    agent, :mod:`satseq.scale.ray_updaters`), holds no optimizer, and calls :meth:`update_agent` where
    it would call its own public ``update_agent(name, batch, weights)``; its state dict passes through
    :meth:`state_dict` (which fills in each agent's entries from where the agent is trained)."""

    def update_agent(self, name: str, batch: TurnBatch, weights: torch.Tensor) -> tuple: ...

    def state_dict(self, updater_state: dict) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


def policy_temperature(cfg) -> float:
    """The temperature log-probs are computed at: the rollout's, or 1 for greedy rollouts."""
    return cfg.rollout.temperature if cfg.rollout.temperature > 0 else 1.0


def make_optimizer(pool, agent: str, lr: float, cfg) -> torch.optim.Optimizer:
    """AdamW over ``agent``'s trainable parameters (``trainer.weight_decay``), recorded in
    ``pool.optimizers`` (a sharded trainer state saves each through torch.distributed.checkpoint)."""
    opt = torch.optim.AdamW(pool.parameters(agent), lr=lr, weight_decay=cfg.trainer.weight_decay)
    registry = getattr(pool, "optimizers", None)
    if registry is not None:
        registry.setdefault(agent, []).append(opt)
    return opt


def reference_logprobs(pool, agent: str, batch: TurnBatch, *, temperature: float, device) -> torch.Tensor:
    """Log-probs ``[B, R]`` of ``batch`` under ``agent``'s frozen reference policy (the base with the
    adapter disabled for LoRA, the kept copy for full fine-tuning: :meth:`AgentPool.keep_reference`)."""
    with pool.reference(agent) as ref:
        lp, _ = batch_logprobs(ref, batch, pool.tokenizer.pad_token_id, temperature=temperature, device=device)
    pool.module(agent)  # LoRA: re-activate the agent's adapter after the reference pass
    return lp


@contextmanager
def training_mode(model):
    """``model.train()`` inside, ``model.eval()`` after (dropout only while fitting)."""
    model.train()
    try:
        yield model
    finally:
        model.eval()


def has_dropout(model) -> bool:
    """Whether training mode changes ``model``'s outputs: a dropout module with p > 0 (peft's
    ``lora_dropout`` included) or attention dropout in the config. Without it, a grad pass at the
    current weights gives exactly the log-probs an eval-mode forward would, and can replace it."""
    config = getattr(model, "config", None)
    if float(getattr(config, "attention_dropout", 0.0) or 0.0) > 0:
        return True
    return any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules())


def minibatches(batch: TurnBatch, epochs: int, size: int,
                generator: torch.Generator) -> Iterator[tuple[torch.Tensor, TurnBatch]]:
    """``epochs`` passes over ``batch`` in shuffled mini-batches of ``size`` (one permutation per
    epoch, drawn from the run's generator when the epoch starts): ``(indices, sub-batch)``."""
    for _ in range(epochs):
        for idx in minibatch_indices(len(batch), size, generator):
            yield idx, batch.select(idx)


StepLoss = Callable[[torch.Tensor, TurnBatch, torch.Tensor, torch.Tensor, Optional[torch.Tensor]], torch.Tensor]


def fit_minibatches(pool, agent: str, model, opt: torch.optim.Optimizer, batch: TurnBatch, step_loss: StepLoss, *,
                    epochs: int, size: int, generator: torch.Generator, temperature: float, device, grad_clip: float,
                    need_logits: bool = False) -> list[float]:
    """The one mini-batch loop of every policy update: in training mode, ``epochs`` passes over
    ``batch`` in shuffled mini-batches of ``size`` (:func:`minibatches`, the run's ``generator``); per
    mini-batch ``(idx, mb)`` the grad forward of ``model`` (log-probs ``lp`` and ``mask`` ``[b, R]``, and
    with ``need_logits`` the log-softmax ``logdist`` ``[b, R, V]``, else None), then
    ``loss = step_loss(idx, mb, lp, mask, logdist)`` and one :func:`optimizer_step` over
    ``pool.parameters(agent)``. Returns each step's loss value, in order."""
    losses: list[float] = []
    with training_mode(model):
        for idx, mb in minibatches(batch, epochs, size, generator):
            lp, mask, *logdist = batch_logprobs(model, mb, pool.tokenizer.pad_token_id, temperature=temperature,
                                                device=device, need_logits=need_logits, grad=True, chunk=len(mb))
            loss = step_loss(idx, mb, lp, mask, logdist[0] if logdist else None)
            losses.append(optimizer_step(opt, loss, pool.parameters(agent), grad_clip))
    return losses


def optimizer_step(opt: torch.optim.Optimizer, loss: torch.Tensor, params, grad_clip: float) -> float:
    """zero_grad → backward, the gradients reduced over the run's workers and the global grad norm
    clipped (if ``grad_clip > 0``: :meth:`satseq.strategy.Strategy.backward`) → step; returns the loss."""
    params = list(params)
    opt.zero_grad(set_to_none=True)
    current_strategy().backward(loss, params, grad_clip)
    opt.step()
    return float(loss.detach())


def mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else 0.0
