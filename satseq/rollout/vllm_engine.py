"""vLLM rollout engine (``rollout.engine=vllm``): the engine the field generates with, in-process and
colocated with the trainer.

One ``vllm.LLM`` per base model, in the trainer's process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so
the trainer hands it new weights without a copy through another process. The workflow still passes
the acting policy's module to :meth:`VLLMEngine.generate`, as with satseq's own engine; the engine
keeps itself in sync with that module:

* **Full models.** Before a call, the engine compares the module's *weight fingerprint* with the
  weights it holds. The fingerprint is each parameter's storage pointer and autograd version counter,
  which every in-place write bumps: an optimizer step, a SAT-Seq shrink or restore, a checkpoint load.
  On any difference it loads the module's ``state_dict`` through the model runner's
  ``reload_weights`` (the CPU backend repacks weights after loading, so the raw ``load_weights``
  cannot be used), then resets the prefix cache, whose KV entries the old weights computed. K full
  agents share one engine, reloaded when the acting agent changes (docs/performance.md measures
  this against one engine per agent).
* **LoRA agents** (one base, K peft adapters), two ways (``rollout.vllm.lora_mode``):

  - ``adapter``: the engine is started with ``enable_lora`` and each agent is an adapter selected per
    request (``LoRARequest``). When an adapter's fingerprint changes, its weights are saved (``peft``
    ``save_pretrained``, a few MB) and registered under a **new id**; the previous version is removed.
    The new id also keeps the prefix cache honest: vLLM keys cached blocks by adapter.
  - ``merged``: the engine is a full-weight engine. Before a call it holds the acting agent's merged
    weights ``W + (α/r)·B·A`` (peft's ``get_delta_weight``, the same merge satseq's fused decode
    makes); when the acting agent, its adapter or the base changes, the merged ``state_dict`` is
    reloaded as for a full model. A relay pays one reload per turn and then decodes at the base
    model's speed, where vLLM's CPU LoRA kernels are several times slower (docs/results.md).
  - ``auto`` (the default): ``merged`` on CPU, ``adapter`` on GPU.

A module whose weights did not change is never reloaded, so a rejected SAT-Seq proposal (the
restore puts back the weights the engine already has, but bumps the version counters) costs one
reload of the same weights, and the engine never samples from a proposal it did not accept.

Sampling: each request gets a seed drawn from its episode's stream (:mod:`satseq.rollout.streams`),
so a seed fixes a run on CPU and a resumed run continues the same streams. The engine's log-probs of
the sampled tokens are vLLM's *processed* log-probs: after temperature (and top-p renormalisation
when ``top_p < 1``), the distribution the token was drawn from. They are the behaviour policy of
the trainer's truncated importance correction (:mod:`satseq.update.engine_correction`).
"""
from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Optional

import torch

from satseq.config.schema import VllmConfig
from satseq.errors import ConfigError
from satseq.rollout.streams import as_row_streams
from satseq.rollout.types import Generation, SamplingParams

INSTALL_HINT = ("install vLLM with `make setup-vllm` (the CPU build, in .venv-vllm) or "
                "`pip install 'satseq[vllm]'` (GPU), or use rollout.engine=hf")
_SEED_HIGH = 2 ** 31 - 1


def _lora_rank(r: int) -> int:
    """The smallest rank vLLM accepts (8, 16, 32, ...) that holds ``r``."""
    out = 8
    while out < r:
        out *= 2
    return out


def vllm_available() -> bool:
    try:
        import vllm  # noqa: F401
    except Exception:  # noqa: BLE001 - a broken install (e.g. a CUDA torchvision) is as unusable as none
        return False
    return True


def _prepare_environment(settings: VllmConfig, device: str) -> None:
    """vLLM reads these at import / engine start: in-process engine; on CPU the KV cache size and no
    thread pinning (the trainer shares the cores)."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    if not str(device).startswith("cuda"):
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(settings.kv_cache_gb)
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")


#: torch's own ``set_num_threads``: vLLM's CPU worker replaces it, process-wide, with a no-op at engine start
_SET_NUM_THREADS = torch.set_num_threads


def _import_vllm():
    try:
        import vllm
        from vllm.lora.request import LoRARequest
    except ImportError as e:
        raise ConfigError(f"rollout.engine=vllm: vLLM is not installed ({e}); {INSTALL_HINT}") from None
    except Exception as e:  # noqa: BLE001
        raise ConfigError(f"rollout.engine=vllm: vLLM failed to import ({type(e).__name__}: {e}); "
                          f"{INSTALL_HINT}") from None
    return vllm, LoRARequest


def is_peft(model) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


def _fingerprint(params) -> tuple:
    return tuple((p.data_ptr(), p._version) for p in params)


def base_state_dict(model) -> dict[str, torch.Tensor]:
    """The transformers model's own weights under their checkpoint names: a peft model's base weights
    with the adapters stripped (``...q_proj.base_layer.weight`` → ``...q_proj.weight``)."""
    if not is_peft(model):
        return dict(model.state_dict())
    inner = model.get_base_model()
    out = {}
    for k, v in inner.state_dict().items():
        if "lora_" in k:
            continue
        out[k.replace(".base_layer.", ".")] = v
    return out


def _adapters_disabled(model) -> bool:
    """Inside peft's ``disable_adapter()`` (the reference policy of LoRA agents): the base computes alone."""
    for m in model.modules():
        if hasattr(m, "lora_A") and hasattr(m, "disable_adapters"):
            return bool(m.disable_adapters)
    return False


def merged_state_dict(model) -> dict[str, torch.Tensor]:
    """A peft model's weights with its active adapter merged in (``W + (α/r)·B·A`` per adapted layer),
    under the base checkpoint's names; the base alone inside ``disable_adapter()``. Nothing is
    modified in place."""
    out = base_state_dict(model)
    if _adapters_disabled(model):
        return out
    inner = model.get_base_model()
    with torch.no_grad():
        for name, m in inner.named_modules():
            if not (hasattr(m, "base_layer") and hasattr(m, "get_delta_weight")) or getattr(m, "merged", False):
                continue
            key = f"{name}.weight"
            for a in m.active_adapters:
                if a in m.lora_A:
                    out[key] = out[key] + m.get_delta_weight(a).to(out[key].dtype)
    return out


def _active_adapter(model) -> str:
    return model.active_adapter if isinstance(model.active_adapter, str) else model.active_adapter[0]


def _lora_mode(settings: VllmConfig, device: str) -> str:
    """``rollout.vllm.lora_mode`` resolved: auto = merged on CPU, adapter on GPU."""
    if settings.lora_mode != "auto":
        return settings.lora_mode
    return "adapter" if str(device).startswith("cuda") else "merged"


#: KV-cache block on CPU: vLLM's CPU default (128) decoded short relay turns 1.5x slower than 32 (docs/vllm.md)
CPU_BLOCK_SIZE = 32


def _block_size(settings: VllmConfig, device: str) -> Optional[int]:
    """``rollout.vllm.block_size``, or on CPU :data:`CPU_BLOCK_SIZE`; None = vLLM's default (GPU)."""
    if settings.block_size:
        return settings.block_size
    return None if str(device).startswith("cuda") else CPU_BLOCK_SIZE


def _base_params(model):
    return [p for n, p in model.named_parameters() if "lora_" not in n]


def _adapter_params(model, name: str):
    return [p for n, p in model.named_parameters() if "lora_" in n and f".{name}." in n]


class _Engine:
    """One started ``vllm.LLM`` and what it holds: whose weights, which adapters under which ids."""

    def __init__(self, llm, lora_mode: Optional[str], scratch: Path):
        """``lora_mode``: None (full models), ``"adapter"`` or ``"merged"`` (LoRA agents)."""
        self.llm, self.lora_mode, self.scratch = llm, lora_mode, scratch
        self.lora = lora_mode == "adapter"       # started with enable_lora
        self.loaded: tuple | None = None         # (id(module), fingerprint[, agent, adapter fingerprint]) in the engine
        self.adapters: dict[str, tuple] = {}     # agent -> (lora id, fingerprint, adapter dir)
        self.ids = itertools.count(1)
        self.reloads = 0
        self.threads: Optional[int] = None  # torch's intra-op threads at start (CPU attention is sized by them)
        self.adapter_versions = 0

    def forget(self) -> None:
        """A new trainer attaches: trust nothing the engine holds (a cached engine is reused across runs)."""
        self.loaded = None
        for lora_id, *_ in self.adapters.values():
            self.llm.llm_engine.remove_lora(lora_id)
        self.adapters.clear()


def _remove_scratch() -> None:
    for eng in _ENGINES.values():
        shutil.rmtree(eng.scratch, ignore_errors=True)


atexit.register(_remove_scratch)  # the starting checkpoints and adapter versions, written under /tmp

#: started engines by what they were started with, so that runs in one process (tests, ``satseq
#: compare`` in-process, a resumed run) reuse one: starting vLLM costs seconds, a reload milliseconds
_ENGINES: dict[str, _Engine] = {}


class VLLMEngine:
    """``rollout.engine=vllm``. Same contract as :class:`satseq.rollout.hf_engine.HFEngine`:
    ``generate(module, prompt_ids, sampling, streams) -> [Generation]``."""

    name = "vllm"

    def __init__(self, tokenizer, *, settings: VllmConfig | None = None, device: str = "cpu",
                 dtype: str = "auto", instance: str = ""):
        """``settings``: the ``rollout.vllm`` config section (:class:`satseq.config.schema.VllmConfig`,
        its defaults when None), read as it is. ``instance``: engines of the same settings share one
        started vLLM unless their instance names differ (the rollout thread of ``trainer.max_staleness``
        runs its own beside the trainer's)."""
        self.tokenizer = tokenizer
        self.instance = instance
        self.settings = settings if settings is not None else VllmConfig()
        self.device = str(device)
        self.dtype = dtype
        self._engine: _Engine | None = None
        self.ignore_eos = False  # benchmarks: exactly max_new_tokens per row
        self.eos_ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
        _prepare_environment(self.settings, self.device)
        self._vllm, self._LoRARequest = _import_vllm()

    # ------------------------------------------------------------------ starting
    def _start(self, model) -> _Engine:
        lora = is_peft(model)
        lora_mode = _lora_mode(self.settings, self.device) if lora else None
        base = model.get_base_model() if lora else model
        config = base.config
        arch = (getattr(config, "architectures", None) or [type(base).__name__])[0]
        self._check_architecture(arch)
        dtype = self.dtype if self.dtype != "auto" else str(next(model.parameters()).dtype).replace("torch.", "")
        context = getattr(config, "max_position_embeddings", None)
        max_len = self.settings.max_model_len or context
        rank = max((c.r for c in model.peft_config.values()), default=8) if lora else None
        n_adapters = len(model.peft_config) if lora else 0
        max_loras = (self.settings.max_loras or min(max(n_adapters, 4), 8)) if lora_mode == "adapter" else 0
        if lora_mode == "adapter" and n_adapters > max_loras:
            raise ConfigError(f"rollout.vllm.max_loras={max_loras} is below the run's {n_adapters} LoRA agents; "
                              f"raise it to {n_adapters}")
        key = json.dumps({"config": config.to_dict(), "dtype": dtype, "len": max_len, "lora": lora_mode,
                          "rank": rank, "max_loras": max_loras, "settings": self.settings.model_dump(),
                          "instance": self.instance}, sort_keys=True,
                         default=str)
        if key in _ENGINES:
            eng = _ENGINES[key]
            eng.forget()
            return eng
        scratch = Path(tempfile.mkdtemp(prefix="satseq-vllm-"))
        src = scratch / "model"
        self._write_checkpoint(base, model, src)
        kwargs = dict(model=str(src), tokenizer=str(src), dtype=dtype, seed=0, enforce_eager=self.settings.enforce_eager,
                      logprobs_mode="processed_logprobs", tensor_parallel_size=self.settings.tensor_parallel_size,
                      enable_prefix_caching=True,
                      # whole prompts per step: with chunked prefill, vLLM 0.32 rewinds a seeded request's
                      # generator after a partial prefill, which a CPU generator cannot do (RuntimeError)
                      enable_chunked_prefill=False)
        if max_len:
            kwargs["max_model_len"] = int(max_len)
        block = _block_size(self.settings, self.device)
        if block:
            kwargs["block_size"] = block
        if self.device.startswith("cuda"):
            kwargs["gpu_memory_utilization"] = self.settings.gpu_memory_utilization
            kwargs["enable_sleep_mode"] = self.settings.sleep
        if lora_mode == "adapter":
            kwargs.update(enable_lora=True, max_loras=max_loras, max_lora_rank=_lora_rank(max(self.settings.max_lora_rank or 0, rank)))
        threads = torch.get_num_threads()
        try:
            llm = self._vllm.LLM(**kwargs)
        except Exception as e:  # noqa: BLE001 - vLLM's start-up errors are long; give the key and the fix
            shutil.rmtree(scratch, ignore_errors=True)
            first = str(e).splitlines()[0] if str(e) else ""
            if self.settings.block_size and "block size" in first.lower():
                raise ConfigError(f"rollout.vllm.block_size={self.settings.block_size}: vLLM refuses it ({first}); "
                                  f"leave it unset (null) for the default") from None
            raise ConfigError(f"rollout.engine=vllm: vLLM could not start on this model ({type(e).__name__}: "
                              f"{first}); use rollout.engine=hf") from None
        finally:
            if torch.get_num_threads() != threads:  # vLLM lowers torch's threads; the trainer keeps its own
                try:
                    torch.set_num_threads(threads)
                except RuntimeError:
                    pass
        eng = _Engine(llm, lora_mode, scratch)
        eng.threads = torch.get_num_threads()
        _ENGINES[key] = eng
        return eng

    def _check_architecture(self, arch: str) -> None:
        try:
            from vllm.model_executor.models import ModelRegistry

            supported = set(ModelRegistry.get_supported_archs())
        except Exception:  # noqa: BLE001 - registry API moved: let vLLM itself refuse
            return
        if arch not in supported:
            raise ConfigError(f"rollout.engine=vllm: vLLM {self._vllm.__version__} does not support the "
                              f"architecture {arch}; use rollout.engine=hf (satseq's engine runs any causal LM)")

    def _write_checkpoint(self, base, model, out: Path) -> None:
        """The starting weights as an HF checkpoint vLLM can open (tied embeddings written once)."""
        from safetensors.torch import save_file

        out.mkdir(parents=True)
        base.config.save_pretrained(out)
        if getattr(base, "generation_config", None) is not None:
            base.generation_config.save_pretrained(out)
        self.tokenizer.save_pretrained(out)
        state = base_state_dict(model)
        if getattr(base.config, "tie_word_embeddings", False):
            state.pop("lm_head.weight", None)
        save_file({k: v.detach().contiguous().cpu() for k, v in state.items()}, str(out / "model.safetensors"))

    # ------------------------------------------------------------------ keeping in sync
    def sync(self, model) -> Optional[object]:
        """Bring the engine to ``model``'s current weights; return the ``LoRARequest`` of its active
        adapter (None for a full model)."""
        if self._engine is None:
            self._engine = self._start(model)
        eng = self._engine
        if is_peft(model) != (eng.lora_mode is not None):
            raise ConfigError("rollout.engine=vllm: one engine serves either full models or LoRA agents, "
                              "not both in one run")
        held_fp = (id(model), _fingerprint(_base_params(model)))
        merged = eng.lora_mode == "merged"
        if merged:  # the acting agent (None: the base, inside disable_adapter()) and its adapter's version
            agent = None if _adapters_disabled(model) else _active_adapter(model)
            held_fp += (agent, None if agent is None else _fingerprint(_adapter_params(model, agent)))
        if eng.loaded != held_fp:
            weights = list((merged_state_dict(model) if merged else base_state_dict(model)).items())
            eng.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
            eng.llm.reset_prefix_cache()
            eng.loaded = held_fp
            eng.reloads += 1
        if not eng.lora or _adapters_disabled(model):  # a LoRA pool's reference policy: the base alone
            return None
        name = _active_adapter(model)
        fp = _fingerprint(_adapter_params(model, name))
        held = eng.adapters.get(name)
        if held is None or held[1] != fp:
            lora_id = next(eng.ids)
            root = eng.scratch / f"{name}-v{lora_id}"
            model.save_pretrained(str(root), selected_adapters=[name], safe_serialization=True)
            path = root / name if (root / name).is_dir() else root  # peft writes a non-default adapter into a subfolder
            if held is not None:
                eng.llm.llm_engine.remove_lora(held[0])
                shutil.rmtree(eng.scratch / f"{name}-v{held[0]}", ignore_errors=True)
            eng.adapters[name] = held = (lora_id, fp, path)
            eng.adapter_versions += 1
        lora_id, _, path = held
        return self._LoRARequest(f"{name}-v{lora_id}", lora_id, str(path))

    # ------------------------------------------------------------------ sampling
    def start(self, model) -> None:
        """Start the engine on ``model``'s weights now, on a fork of torch's global generator (vLLM seeds
        it at start). The rollout thread's engine is started this way on the trainer's thread, before the
        thread runs: a fork taken inside the thread would restore the global generator under the trainer."""
        with self._own_rng():
            self.sync(model)

    def _own_rng(self):
        # vLLM may draw from torch's global generator (engine start, weight loading); the trainer's
        # dropout draws from it too, so the engine runs on a fork of it and leaves it untouched. Off the
        # main thread (the rollout thread, whose engine start() started) no fork: restoring the global
        # state there would rewind the trainer's draws made meanwhile; a started engine given per-row
        # seeds draws nothing from it
        if threading.current_thread() is not threading.main_thread():
            if self._engine is None:
                raise RuntimeError("VLLMEngine: start() the engine on the main thread before generating from another")
            return contextlib.nullcontext()
        cuda = [torch.device(self.device).index or 0] if self.device.startswith("cuda") else []
        return torch.random.fork_rng(devices=cuda)

    def generate(self, model, prompts: list[list[int]], sampling: SamplingParams, generator=None) -> list[Generation]:
        """One response per prompt from ``model``'s current weights; row i's seed comes from its stream."""
        if not prompts:
            return []
        with self._own_rng():
            return self._generate(model, prompts, sampling, generator)

    def _generate(self, model, prompts, sampling: SamplingParams, generator) -> list[Generation]:
        lora_request = self.sync(model)
        threads = self._engine.threads
        if (threading.current_thread() is not threading.main_thread() and not self.device.startswith("cuda")
                and threads and torch.get_num_threads() != threads):
            # vLLM's CPU attention is sized by the thread count at engine start and aborts the process (a
            # failed C++ check) when the calling thread runs another OpenMP count; vLLM has made
            # torch.set_num_threads a no-op, so the rollout thread is given the start's count with torch's own
            _SET_NUM_THREADS(threads)
        llm = self._engine.llm
        max_len = llm.llm_engine.model_config.max_model_len
        longest = max(len(p) for p in prompts)
        if longest + sampling.max_new_tokens > max_len:
            raise ConfigError(f"rollout.vllm.max_model_len: a prompt of {longest} tokens + rollout.max_new_tokens="
                              f"{sampling.max_new_tokens} exceeds the engine's {max_len}; raise "
                              f"rollout.vllm.max_model_len (up to the model's context) or shorten the prompts")
        streams = as_row_streams(generator, len(prompts))
        seeds = [None if streams is None else int(torch.randint(0, _SEED_HIGH, (), generator=s)) for s in
                 (streams or [None] * len(prompts))]
        params = [self._vllm.SamplingParams(
            n=1, max_tokens=sampling.max_new_tokens, temperature=max(sampling.temperature, 0.0),
            top_p=sampling.top_p, stop=list(sampling.stop) or None, include_stop_str_in_output=True,
            seed=seed, logprobs=0, detokenize=bool(sampling.stop), ignore_eos=self.ignore_eos) for seed in seeds]
        if self.settings.sleep and self.device.startswith("cuda"):
            llm.wake_up()
        # a call's samples depend on its prompts, weights and seeds only: KV blocks cached by an earlier
        # call (an adapter that did not move, the base) are dropped, because reusing them changes the
        # rounding of what follows, and a resumed run, which starts with an empty cache, would drift
        llm.reset_prefix_cache()
        outs = llm.generate([{"prompt_token_ids": list(p)} for p in prompts], params, lora_request=lora_request,
                            use_tqdm=False)
        if self.settings.sleep and self.device.startswith("cuda"):
            llm.sleep(level=1)
        return [self._generation(p, o.outputs[0]) for p, o in zip(prompts, outs)]

    def _generation(self, prompt, out) -> Generation:
        ids = list(out.token_ids)
        lps = [float(step[t].logprob) for step, t in zip(out.logprobs, ids)]
        if out.finish_reason == "length":
            reason = "length"
        elif out.stop_reason is None or (ids and ids[-1] in self.eos_ids and out.stop_reason in self.eos_ids):
            reason = "eos"
        else:
            reason = "stop"
        return Generation(prompt_ids=list(prompt), response_ids=ids, logprobs=lps,
                          text=self.tokenizer.decode(ids, skip_special_tokens=True), finish_reason=reason)

    # ------------------------------------------------------------------ introspection (tests, metrics)
    @property
    def reloads(self) -> int:
        return 0 if self._engine is None else self._engine.reloads

    @property
    def adapter_versions(self) -> int:
        return 0 if self._engine is None else self._engine.adapter_versions
