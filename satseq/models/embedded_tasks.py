"""Which embedded task ``data.train=embedded`` / ``model.path=embedded`` mean: the method's own
(``data.embedded_task=default``), or a named task that several methods can be compared on.

A named task brings its problems and its warm start (built once, like a method's own, on top of the
base warm start of :mod:`satseq.models.warm_start`):

=========  ===============================================  =====================================
name       problems                                          warm start
=========  ===============================================  =====================================
``chain``  ``a+b+c`` in the relay layout                     stage 1 / stage 2 / copy / single pass
           (:mod:`satseq.data.relay_chain`)                  (``embedded/chain_seed<seed>``)
=========  ===============================================  =====================================
"""
from __future__ import annotations

from pathlib import Path

from satseq.models.warm_start import HELD_OUT_POOL, WarmStartRecipe, ensure_method_warm_start
from satseq.data.relay_chain import chain_probes

DEFAULT = "default"



#: SFT on the chain transcripts until stage 1, stage 2 and copy are each right on 85 % of the
#: validation probes (greedy), then 150 cool-down steps (docs/embedded_default.md)
CHAIN_RECIPE = WarmStartRecipe(probes=chain_probes, target=0.85, lr=2e-3, max_new_tokens=64)


def ensure_chain_warm_start(output_dir: str | Path, *, seed: int = 0, n_examples: int = 64000,
                            eval_size: int = HELD_OUT_POOL, **kw) -> Path:
    from satseq.data.relay_chain import MIX, POSITION_WEIGHTS, ChainTask, chain_examples

    return ensure_method_warm_start(
        output_dir, stem="chain", task=ChainTask(seed=seed), examples=chain_examples, recipe=CHAIN_RECIPE,
        what="chain-relay stage 1 / stage 2 / copy / single-pass", info={"task": "embedded chain relay", "positions": {str(k): v for k, v in POSITION_WEIGHTS.items()},
                                                                         "mix": {str(k): v for k, v in MIX.items()}},
        seed=seed, n_examples=n_examples, eval_size=eval_size, **kw)


def _chain_task(seed: int):
    from satseq.data.relay_chain import ChainTask

    return ChainTask(seed=seed)


#: name -> (task factory(seed), warm-start builder(output_dir, **kw))
EMBEDDED_TASKS = {"chain": (_chain_task, ensure_chain_warm_start)}


def config_defaults(name: str) -> dict:
    """Config keys embedded task ``name`` sets when the user leaves them unset (the chain's stages
    restate their operands: ``rollout.max_new_tokens`` 64)."""
    if name == "chain":
        from satseq.data.relay_chain import MAX_NEW_TOKENS

        return {"rollout.max_new_tokens": MAX_NEW_TOKENS}
    return {}


def embedded_task(name: str, method, seed: int = 0):
    """The task object of embedded task ``name`` (``default``: the method's own)."""
    return method.embedded_task(seed=seed) if name == DEFAULT else EMBEDDED_TASKS[name][0](seed)


def ensure_embedded_warm_start(name: str, method, output_dir, **kw) -> Path:
    """The warm start ``model.path=embedded`` means under embedded task ``name``."""
    return method.ensure_warm_start(output_dir, **kw) if name == DEFAULT else EMBEDDED_TASKS[name][1](output_dir, **kw)
