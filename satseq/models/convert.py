"""GGUF → an ordinary Hugging Face model directory (``satseq convert-gguf``)."""
from __future__ import annotations

import os
from pathlib import Path

from satseq.errors import SatseqError
from satseq.models.gguf import write_hf_dir
from satseq.models.loading import _torch_dtype, load_causal_lm, resolve_model_source


def gguf_to_hf(gguf_path: str | os.PathLike, out_dir: str | os.PathLike, *, dtype: str = "float32") -> Path:
    """Convert a GGUF file (or ``"smollm2"``) into an ordinary HF model directory at ``out_dir``.

    Writes safetensors weights, config, generation config, tokenizer and chat template into a
    temporary sibling directory and renames it into place, so ``out_dir`` is either absent or
    complete. An existing ``out_dir`` is replaced only if it is empty or a model directory
    (has ``config.json``).
    """
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
    return write_hf_dir(model, tok, out)
