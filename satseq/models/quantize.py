"""Quantized base models (``model.quantization``): the frozen base in 8 or 4 bits, LoRA adapters on it.

- ``int8``: LLM.int8 (Dettmers et al. 2022, arXiv:2208.07339): each linear weight stored as int8
  with one absmax scale per output row; ``X W^T`` is computed as an int8 matmul of the row-wise
  quantized activations, with the activation columns holding an outlier (``|x| > 6``, the default
  ``llm_int8_threshold``) multiplied in 16-bit instead. bitsandbytes' ``Linear8bitLt``.
- ``nf4``: 4-bit NormalFloat (QLoRA, Dettmers et al. 2023, arXiv:2305.14314): blocks of 64
  weights, each scaled by its absmax onto the 16 quantiles of N(0, 1); a forward dequantizes the
  weight to the compute dtype (``model.dtype``) and multiplies. bitsandbytes' ``Linear4bit``.

Both go through transformers' ``BitsAndBytesConfig`` (``load_in_8bit`` / ``load_in_4bit`` with
``bnb_4bit_quant_type="nf4"``; transformers 5 removed the bare ``load_in_8bit=True`` argument of
``from_pretrained``). The embeddings, the norms and the LM head stay in ``model.dtype``
(transformers keeps the output embedding unquantized). The base is frozen: only LoRA adapters train
(QLoRA's recipe), so full fine-tuning, FSDP2 (it shards dense parameters) and vLLM (it loads the
base itself, from dense weights) are refused at config validation (:func:`check_config`).

A GGUF source (the bundled SmolLM2) is first dequantized into a plain model (:mod:`satseq.models.gguf`),
then quantized from that model's state dict (:func:`quantize_plain`), in memory: no checkpoint is
written. satseq's engine decodes a quantized base through the model's own forward (bitsandbytes'
kernels): the fused decode (:mod:`satseq.rollout.fused_decode`) reads dense weights and is routed off
(:func:`is_quantized`).
"""
from __future__ import annotations

import importlib.util
import logging

import torch

from satseq.errors import ConfigError, SatseqError

QUANTIZATIONS = ("none", "int8", "nf4")
_MISSING = "model.quantization needs bitsandbytes: pip install 'satseq[quant]' (bitsandbytes>=0.50)"


def require_bitsandbytes() -> None:
    """One line naming the package when bitsandbytes is not installed."""
    if importlib.util.find_spec("bitsandbytes") is None:
        raise SatseqError(_MISSING)


def bnb_config(kind: str, compute_dtype: torch.dtype = torch.float32):
    """The ``BitsAndBytesConfig`` of ``model.quantization=kind`` (``int8`` or ``nf4``); ``compute_dtype``:
    the dtype nf4 weights are dequantized to in a forward (``model.dtype``)."""
    from transformers import BitsAndBytesConfig

    if kind == "int8":
        return BitsAndBytesConfig(load_in_8bit=True)
    if kind == "nf4":
        return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                  bnb_4bit_compute_dtype=compute_dtype)
    raise ConfigError(f"config key 'model.quantization': unknown value {kind!r} (known: {', '.join(QUANTIZATIONS)})")


def quiet_int8_cast_warning() -> None:
    """bitsandbytes logs "MatMul8bitLt: inputs will be cast from torch.float32 to float16" on every int8
    matmul (the cast is LLM.int8's: activations are quantized from 16-bit); shown once is enough. On an
    AVX512-BF16 CPU its import also logs that the hub kernel of its bf16 4-bit path could not be loaded:
    that path is switched off here (:func:`portable_kernels`), so the line is dropped."""
    log = logging.getLogger("bitsandbytes.autograd._functions")
    if not any(isinstance(f, _OnceFilter) for f in log.filters):
        log.addFilter(_OnceFilter())
    ops = logging.getLogger("bitsandbytes.backends.cpu.ops")
    if not any(isinstance(f, _DropFilter) for f in ops.filters):
        ops.addFilter(_DropFilter("Failed to load CPU gemm_4bit_forward"))


class _DropFilter(logging.Filter):
    def __init__(self, prefix: str):
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefix)


class _OnceFilter(logging.Filter):
    def __init__(self):
        super().__init__()
        self.seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        msg = str(record.msg)
        if msg in self.seen:
            return False
        self.seen.add(msg)
        return True


def from_pretrained_kwargs(kind: str, dtype, device) -> dict:
    """What ``from_pretrained`` takes to load quantized: the config, and ``device_map`` (bitsandbytes
    quantizes each weight as it is placed; a quantized model refuses a later ``.to(dtype)``)."""
    require_bitsandbytes()
    quiet_int8_cast_warning()
    compute = dtype if isinstance(dtype, torch.dtype) else torch.float32
    return {"quantization_config": bnb_config(kind, compute), "device_map": {"": str(device)}}


def portable_kernels(model) -> None:
    """Keep every 4-bit layer on bitsandbytes' dequantize-then-matmul path in the compute dtype.

    On a CPU with AVX512-BF16, bitsandbytes 0.50 repacks a ``Linear4bit`` weight, for good, into a bf16
    layout the first time the layer runs in eval mode on an input that needs no gradient (a rollout);
    from then on every forward, training ones too, calls a bf16 ``gemv_4bit`` that has no autograd
    formula, so no gradient reaches the layers below it: after one rollout only 30 of SmolLM2's 120
    LoRA B matrices received a gradient (measured). It also makes the numbers depend on the CPU.
    Switched off here (``support_avx512bf16_for_cpu = False``), a 4-bit forward is the same
    dequantize + ``F.linear`` on every CPU, in training and in rollouts."""
    for m in model.modules():
        if hasattr(m, "support_avx512bf16_for_cpu"):
            m.support_avx512bf16_for_cpu = False


def quantize_plain(model, kind: str, device="cpu"):
    """``model`` (a plain transformers causal LM, e.g. a dequantized GGUF) quantized in memory: the
    same class built from its config and loaded from its state dict through ``BitsAndBytesConfig``."""
    import copy

    dtype = next(model.parameters()).dtype
    config = copy.deepcopy(model.config)
    qmodel = type(model).from_pretrained(None, config=config, state_dict=model.state_dict(), dtype=dtype,
                                         **from_pretrained_kwargs(kind, dtype, device))
    if getattr(model, "generation_config", None) is not None:
        qmodel.generation_config = copy.deepcopy(model.generation_config)
    return qmodel


def from_seed_flags(load_in_8bit: bool = False, load_in_4bit: bool = False) -> str:
    """``model.quantization`` for the A*-PO + PAG seed's ``from_pretrained(..., load_in_8bit=True)`` (an
    argument transformers 5 removed): ``load_in_8bit`` → ``int8``, ``load_in_4bit`` → ``nf4`` (QLoRA's
    4-bit type), neither → ``none``."""
    if load_in_8bit and load_in_4bit:
        raise ConfigError("load_in_8bit and load_in_4bit: choose one")
    return "int8" if load_in_8bit else "nf4" if load_in_4bit else "none"


def is_quantized(model) -> bool:
    """Whether ``model`` (or the transformers model under a peft wrapper) holds bitsandbytes weights."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return bool(getattr(base, "is_loaded_in_8bit", False) or getattr(base, "is_loaded_in_4bit", False))


def quantization_of(model) -> str:
    """``int8``, ``nf4`` (or ``fp4``) for a bitsandbytes model, else ``none``."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if getattr(base, "is_loaded_in_8bit", False):
        return "int8"
    if getattr(base, "is_loaded_in_4bit", False):
        q = getattr(getattr(base, "config", None), "quantization_config", None)
        kind = q.get("bnb_4bit_quant_type") if isinstance(q, dict) else getattr(q, "bnb_4bit_quant_type", "nf4")
        return kind or "nf4"
    return "none"


def prepare_for_lora(base) -> None:
    """peft's ``prepare_model_for_kbit_training`` on a quantized base, without its gradient
    checkpointing (``trainer.gradient_checkpointing`` decides that): the base frozen, its fp16/bf16
    parameters (norms, embeddings) upcast to fp32 for a stable backward. A float32 base has nothing to
    upcast; a non-quantized base is left alone (its behaviour stays exactly as before)."""
    if not is_quantized(base):
        return
    from peft import prepare_model_for_kbit_training

    prepare_model_for_kbit_training(base, use_gradient_checkpointing=False)


def _embedded_format(path: str) -> bool:
    """``embedded``, or a model directory of the embedded format (``satseq_prompt_format`` in its
    config.json): what ``model.lora.enabled=auto`` fine-tunes fully (satseq.runtime.build_pool)."""
    if path == "embedded":
        return True
    import json
    from pathlib import Path

    f = Path(path).expanduser() / "config.json"
    try:
        return json.loads(f.read_text()).get("satseq_prompt_format") == "embedded"
    except (OSError, ValueError, AttributeError):
        return False


def refuse_full(models) -> None:
    """Full fine-tuning of a quantized model reached at load time (``model.lora.enabled=auto`` resolved
    to full by the agents' paths): the same one line as :func:`check_config`."""
    if any(is_quantized(m) for m in models):
        raise ConfigError("config key 'model.quantization': full fine-tuning cannot update 8/4-bit weights: "
                          "set model.lora.enabled=true")


def check_config(cfg) -> None:
    """The settings a quantized base cannot run with, each a one-line :class:`ConfigError` naming
    ``model.quantization``: full fine-tuning (``model.lora.enabled=false``, or ``auto`` on the embedded
    model, which fine-tunes fully), ``trainer.strategy=fsdp2``, ``rollout.engine=vllm``, a
    ``rollout.dtype`` other than the model's (the quantized forward is the rollout's) and an explicit
    ``rollout.decode_gemm`` (the fused decode it picks a kernel for does not run on quantized weights)."""
    q = cfg.model.quantization
    if q == "none":
        return
    lora = cfg.model.lora.enabled
    why = None
    if lora is False:
        why = "full fine-tuning (model.lora.enabled=false) cannot update 8/4-bit weights: use LoRA adapters"
    elif lora == "auto" and _embedded_format(cfg.model.path):
        why = ("the embedded model is fully fine-tuned (model.lora.enabled=auto), which cannot update 8/4-bit "
               "weights: set model.lora.enabled=true")
    elif cfg.trainer.strategy == "fsdp2":
        why = "trainer.strategy=fsdp2 shards dense parameters, not bitsandbytes weights: use replicate"
    elif cfg.rollout.engine == "vllm":
        why = "rollout.engine=vllm loads the base from dense weights: use rollout.engine=hf (or auto)"
    elif cfg.rollout.dtype not in ("auto", cfg.model.dtype):
        why = (f"rollout.dtype={cfg.rollout.dtype}: a quantized base decodes through its own forward in "
               f"model.dtype ({cfg.model.dtype}); use rollout.dtype=auto")
    elif cfg.rollout.decode_gemm not in ("auto", "torch"):
        why = (f"rollout.decode_gemm={cfg.rollout.decode_gemm}: the fused decode does not run on quantized "
               f"weights; use rollout.decode_gemm=auto")
    if why:
        raise ConfigError(f"config key 'model.quantization': {q}: {why}")
