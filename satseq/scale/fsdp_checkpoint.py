"""The trainer state of a ``trainer.strategy=fsdp2`` run, through ``torch.distributed.checkpoint`` (DCP).

``trainer_state/dcp/`` holds every agent's trainable weights and every optimizer's state (AdamW
moments and step counts), each rank writing its own shards (``__<rank>_0.distcp``) and rank 0 the
global metadata (``.metadata``); ``trainer_state/state.pt`` holds the rest, as for ``replicate``
(stage, β's, the run generator, the sampler position, RNG states). DCP records each tensor's global
shape and every shard's offsets, and a load reshards into whatever the loading run holds: a run saved
on N ranks resumes on M (one process included, whose tensors are plain).

Optimizer states go through ``torch.distributed.checkpoint.state_dict``'s
``get_optimizer_state_dict`` / ``set_optimizer_state_dict`` (flattened, keyed by parameter name,
not by the per-rank parameter index). The optimizers are the ones :func:`satseq.update.loop.make_optimizer`
recorded in ``pool.optimizers``; an optimizer that has not stepped yet is not saved (asking for its
state dict would initialise it, and change the run). In the updater's own state dict, which goes to
``state.pt``, each optimizer's state dict is replaced by a marker (:func:`strip_optimizers`) and put
back after the DCP load (:func:`fill_optimizers`): the updaters themselves are unchanged.
"""
from __future__ import annotations

from pathlib import Path

import torch

DCP_DIR = "dcp"
_MARK = "__dcp_optimizer__"


def _options():
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(flatten_optimizer_state_dict=True)


def _optimizers(pool) -> dict[str, tuple[str, torch.optim.Optimizer]]:
    """``"<agent>.<i>"`` → (agent, optimizer) for every optimizer made for the pool's agents."""
    return {f"{agent}.{i}": (agent, opt) for agent, opts in getattr(pool, "optimizers", {}).items()
            for i, opt in enumerate(opts)}


def _weights(pool) -> dict:
    return {name: dict(pool.named_trainable(name)) for name in pool.names}


def save(directory: Path, pool) -> list[str]:
    """Write the pool's weights and stepped optimizers' states to ``directory`` (a collective: every
    rank calls it with the same directory); returns the optimizer keys saved."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    optims = {key: get_optimizer_state_dict(pool.module(agent), opt, options=_options())
              for key, (agent, opt) in _optimizers(pool).items() if opt.state}
    dcp.save({"weights": _weights(pool), "optimizers": optims}, checkpoint_id=str(directory))
    return sorted(optims)


def load(directory: Path, pool, optimizer_keys: list[str] | None) -> None:
    """Read weights (in place, resharded to this run's layout) and the saved optimizers' states."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

    known = _optimizers(pool)
    keys = [k for k in (optimizer_keys or []) if k in known]
    templates = {k: get_optimizer_state_dict(pool.module(known[k][0]), known[k][1], options=_options()) for k in keys}
    state = {"weights": _weights(pool), "optimizers": templates}
    with torch.no_grad():
        dcp.load(state, checkpoint_id=str(directory))
    for k in keys:
        agent, opt = known[k]
        set_optimizer_state_dict(pool.module(agent), opt, state["optimizers"][k], options=_options())
    for name in pool.names:
        pool.module(name)  # LoRA: the adapters' trainable flags as AgentPool keeps them


def strip_optimizers(tree, pool):
    """``tree`` (an updater's state dict) with each of the pool's optimizers' state dicts replaced by
    a marker naming it (its tensors are found by identity in the optimizer's state)."""
    owner = {}
    for key, (_, opt) in _optimizers(pool).items():
        for st in opt.state.values():
            for v in st.values():
                if isinstance(v, torch.Tensor):
                    owner[id(v)] = key

    def marker(x: dict):
        if set(x) != {"state", "param_groups"}:
            return None
        for st in x["state"].values():
            for v in st.values():
                if id(v) in owner:
                    return {_MARK: owner[id(v)]}
        return x  # not stepped yet: no tensors, nothing sharded

    return _rewrite(tree, marker)


def _rewrite(tree, replace):
    """``tree`` (nested dicts, lists, tuples) with each dict for which ``replace`` returns a value
    swapped for that value (and not walked further)."""
    if isinstance(tree, dict):
        new = replace(tree)
        return new if new is not None else {k: _rewrite(v, replace) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_rewrite(v, replace) for v in tree)
    return tree


def fill_optimizers(tree, pool):
    """The inverse of :func:`strip_optimizers`, after :func:`load`: each marker → that optimizer's
    state dict as now loaded."""
    known = _optimizers(pool)

    return _rewrite(tree, lambda x: known[x[_MARK]][1].state_dict() if set(x) == {_MARK} else None)
