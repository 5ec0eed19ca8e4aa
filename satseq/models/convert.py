"""GGUF → an ordinary Hugging Face model directory (``satseq convert-gguf``)."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from satseq.errors import SatseqError
from satseq.models.loading import _read_json, _torch_dtype, load_causal_lm, resolve_model_source
from satseq.utils.io import write_text


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
