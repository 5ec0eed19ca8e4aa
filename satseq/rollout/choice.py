"""``rollout.engine=auto``, ``rollout.dtype=auto`` and ``rollout.decode_gemm=auto``: the rollout engine, its
precision and satseq's decode GEMM kernel, chosen by measurement.

The fastest engine and precision differ by machine: on one 2-core AMD EPYC satseq's engine ran bf16
2.4x faster than fp32 and vLLM's CPU build beat it, on an Intel Xeon bf16 ran at half the fp32 rate and
satseq's engine beat vLLM (docs/results.md). So ``auto`` measures, on the run's own model, device and
threads, before the first stage:

- candidates: ``hf`` (satseq's engine) always, ``vllm`` when it is installed and the rollouts are
  synchronous (``engine=auto`` only);
  float32 and, where the trainer is float32, bfloat16 (``dtype=auto`` only); for satseq's fused decode on
  a CPU, each decode GEMM kernel this torch build has in that precision (``decode_gemm=auto`` only:
  MKL's packed GEMM, oneDNN's packed linear, ``F.linear``; :mod:`satseq.rollout.fused_decode`);
- a quantized base (``model.quantization``): ``hf`` in ``model.dtype`` only (its own bitsandbytes forward;
  nothing to measure);
- on a CPU, a bf16 matmul of the model's MLP shape is timed against fp32 first; where it takes over
  ``SCREEN`` times as long, bf16 is not tried (its speed is recorded as 0): decoding SmolLM2 in bf16 at
  one thread on an AVX2 CPU would spend minutes to find what the matmul shows in milliseconds;
- each candidate decodes ``rows`` sequences of a ``prompt``-token prompt for ``new`` tokens after a
  warm-up, timed ``reps`` times; its speed is the median, in generated tokens per second;
- the fastest wins, but bfloat16, vLLM and a GEMM kernel other than the default (MKL's where the build
  has it) only when they beat float32 / ``hf`` / the default kernel by ``MARGIN`` (the float32 ``hf``
  rollout is the trainer's own forward, exact, and needs no correction; the kernels differ from it by
  rounding only, so a kernel needs no correction either). A bfloat16 or
  vLLM rollout samples from a slightly different policy than the trainer's, so
  ``rollout.is_correction=auto`` turns the truncated importance weight on for it
  (:mod:`satseq.update.engine_correction`).

The choice is printed, recorded in ``run_info.json`` (``rollout``: engine, dtype, gemm, the measured speeds,
where the choice came from) and cached per machine, torch version, device, threads and model shape
(``<cache>/rollout_choice.json``, the cache root of :func:`satseq.models.gguf.cache_root`). A resumed run
reuses its recorded choice and never measures again, so it continues what it started.
``SATSEQ_ROLLOUT_CALIBRATION=off`` skips the measurement: ``auto`` is then ``hf`` in the model's dtype,
the choice made before ``auto`` existed (the test suite runs so, to be the same on every CPU). The
measurement draws on its own generator inside :func:`torch.random.fork_rng`, so the run's random
streams are the same whether the choice was measured, cached or resumed.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional

import torch

from satseq.utils.machine import cpu_key

SWITCH_ENV = "SATSEQ_ROLLOUT_CALIBRATION"
MARGIN = 1.10  # bf16 / vLLM must be this much faster than fp32 / hf to be chosen
SCREEN = 1.5   # a CPU whose bf16 matmul takes this much longer than fp32's does not try bf16 decoding
ROWS, PROMPT, NEW, REPS = 16, 32, 16, 3


@dataclass
class RolloutChoice:
    engine: str
    dtype: str
    source: str  # measured | cached | resumed | fixed (set in the config) | default (calibration off)
    speeds: dict = field(default_factory=dict)  # "engine/dtype[/gemm]" -> generated tokens per second
    gemm: str = "auto"  # satseq's decode GEMM kernel (auto: the build's default, as before it was measured)

    def line(self) -> str:
        speeds = ", ".join(f"{k} {v:,.0f} tok/s" if v else f"{k} not tried or failed" for k, v in self.speeds.items())
        kernel = f" ({self.gemm} GEMMs)" if self.engine == "hf" and self.gemm != "auto" else ""
        return f"[satseq] rollout: {self.engine} in {self.dtype}{kernel} ({self.source}{'; ' + speeds if speeds else ''})"


def calibration_off() -> bool:
    return os.environ.get(SWITCH_ENV, "on").strip().lower() in ("0", "off", "false", "no")


def _machine() -> str:
    """The processor (model name and the flags that decide bf16 speed) or the GPU."""
    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return cpu_key()


def cache_key(model, device: str, candidates: list[tuple[str, str]]) -> str:
    c = model.config
    shape = [getattr(c, k, None) for k in ("model_type", "hidden_size", "num_hidden_layers", "intermediate_size",
                                           "num_attention_heads", "num_key_value_heads", "vocab_size")]
    parts = [_machine(), torch.__version__, str(device), torch.get_num_threads(), shape, sorted(candidates),
             [ROWS, PROMPT, NEW]]
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:16]


def _cache_file() -> Path:
    from satseq.models.gguf import cache_root

    return cache_root() / "rollout_choice.json"


def _read_cache() -> dict:
    try:
        return json.loads(_cache_file().read_text())
    except (OSError, ValueError):
        return {}


def _write_cache(key: str, speeds: dict) -> None:
    from satseq.utils.io import write_json

    entries = _read_cache()
    entries[key] = {"speeds": speeds, "machine": _machine(), "torch": torch.__version__}
    try:
        _cache_file().parent.mkdir(parents=True, exist_ok=True)
        write_json(_cache_file(), entries)
    except OSError:  # a read-only home: measure again next time
        pass


def bf16_matmul_slowdown(model, device: str, reps: int = 20) -> float:
    """Time of a bf16 matmul over an fp32 one of the model's MLP shape (``ROWS`` × hidden × intermediate):
    a screen, so that a CPU whose bf16 GEMMs are plainly slower does not spend minutes decoding in bf16
    to find out (SmolLM2 at one thread on an AVX2 CPU: about 6x)."""
    c = model.config
    k, n = int(getattr(c, "hidden_size", 256)), int(getattr(c, "intermediate_size", 1024))
    times = {}
    with torch.random.fork_rng(devices=[]):
        g = torch.Generator().manual_seed(0)
        for dt in (torch.float32, torch.bfloat16):
            a = torch.randn(ROWS, k, generator=g).to(device=device, dtype=dt)
            b = torch.randn(k, n, generator=g).to(device=device, dtype=dt)
            a @ b  # warm-up
            t0 = time.perf_counter()
            for _ in range(reps):
                a @ b
            if str(device).startswith("cuda"):
                torch.cuda.synchronize()
            times[dt] = time.perf_counter() - t0
    return times[torch.bfloat16] / max(times[torch.float32], 1e-9)


def measure(engine_name: str, dtype: str, model, tokenizer, device: str, cfg, gemm: str = "auto") -> float:
    """Generated tokens per second of ``engine_name`` in ``dtype`` (satseq's engine: with the decode GEMM
    kernel ``gemm``) on ``model``: ``ROWS`` rows, a ``PROMPT``-token prompt, ``NEW`` new tokens (no early
    stop), median of ``REPS`` after a warm-up."""
    from satseq.rollout.engine import make_engine
    from satseq.rollout.types import SamplingParams

    engine = make_engine(engine_name, tokenizer, batch_size=ROWS, device=device, fused=cfg.rollout.fused,
                         dtype=dtype, vllm=cfg.rollout.vllm, gemm=gemm)
    if hasattr(engine, "eos_ids"):
        engine.eos_ids = set()  # every row runs to NEW tokens
    vocab = int(model.config.vocab_size)
    prompts = [[(7 * i + 13 * j) % vocab for j in range(PROMPT)] for i in range(ROWS)]
    sampling = SamplingParams(max_new_tokens=NEW, temperature=1.0)
    times = []
    with torch.random.fork_rng(devices=[]):
        for rep in range(REPS + 1):
            t0 = time.perf_counter()
            gens = engine.generate(model, prompts, sampling, torch.Generator().manual_seed(rep))
            if rep:
                times.append((time.perf_counter() - t0) / max(1, sum(len(g.response_ids) for g in gens)))
    close = getattr(engine, "close", None)
    if callable(close):
        close()
    return 1.0 / statistics.median(times)


def _gemms(cfg, engine: str, dtype: str, device: str) -> list[str]:
    """The decode GEMM kernels to measure for ``engine`` in ``dtype``: the build's default first."""
    from satseq.rollout.fused_decode import available_gemms

    r = cfg.rollout
    if engine != "hf" or r.decode_gemm != "auto":
        return [r.decode_gemm]
    if not str(device).startswith("cpu") or not r.fused:
        return ["auto"]
    return available_gemms(getattr(torch, dtype), device)


def _name(engine: str, dtype: str, gemm: str) -> str:
    return f"{engine}/{dtype}" + (f"/{gemm}" if gemm != "auto" else "")


def choose(cfg, model, tokenizer, device: str, run_dir: Optional[Path] = None,
           measure_fn: Optional[Callable] = None) -> RolloutChoice:
    """The engine, precision and decode GEMM kernel ``auto`` stands for, in this run (see the module docstring)."""
    from satseq.rollout.fused_decode import supports

    r = cfg.rollout
    model_dtype = cfg.model.dtype
    # a quantized base (model.quantization) decodes through its own forward in model.dtype, on satseq's engine
    dense = getattr(cfg.model, "quantization", "none") == "none"
    gemm_auto = r.decode_gemm == "auto" and r.engine in ("auto", "hf") and str(device).startswith("cpu") \
        and r.fused and dense and hasattr(model, "config") and supports(model)
    vllm_ok = importlib.util.find_spec("vllm") is not None and cfg.trainer.max_staleness == 0 and dense  # async: hf only
    engines = [r.engine] if r.engine != "auto" else ["hf"] + (["vllm"] if vllm_ok else [])
    if r.dtype != "auto":
        dtypes = [r.dtype]
    else:
        dtypes = [model_dtype] + (["bfloat16"] if model_dtype == "float32" and dense else [])
    candidates = [(e, d, g) for e in engines for d in dtypes
                  for g in (_gemms(cfg, e, d, device) if gemm_auto and e == "hf" else [r.decode_gemm])]
    if r.engine != "auto" and r.dtype != "auto" and len(candidates) == 1:  # nothing to choose
        return RolloutChoice(r.engine, r.dtype, "fixed", gemm=r.decode_gemm)
    if not dense:  # one candidate: satseq's engine in model.dtype through the quantized forward
        return RolloutChoice("hf", model_dtype, "fixed", gemm=r.decode_gemm)
    if cfg.resume and run_dir is not None:
        rec = recorded(run_dir)
        if rec is not None:
            return rec
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    if calibration_off() or distributed or not hasattr(model, "config"):
        return default_choice(cfg)
    key = cache_key(model, device, candidates)
    cached = _read_cache().get(key)
    if cached:
        speeds, source = cached["speeds"], "cached"
    else:
        speeds = {}
        slow_bf16 = (len(dtypes) > 1 and not str(device).startswith("cuda")
                     and bf16_matmul_slowdown(model, device) > SCREEN)
        for e, d, g in candidates:
            if slow_bf16 and d == "bfloat16":
                speeds[_name(e, d, g)] = 0.0  # screened out: bf16 matmuls plainly slower here
                continue
            try:
                speeds[_name(e, d, g)] = (measure_fn or measure)(e, d, model, tokenizer, device, cfg, g)
            except Exception as err:  # a candidate that cannot run here (vLLM on this model, say) is not chosen
                if (e, d, g) == candidates[0]:
                    raise
                speeds[_name(e, d, g)] = 0.0
                print(f"[satseq] rollout calibration: {_name(e, d, g)} failed ({type(err).__name__}: "
                      f"{str(err).splitlines()[0] if str(err) else ''}); not a candidate")
        source = "measured"
        _write_cache(key, speeds)
    # hf (or the named engine) in the trainer's dtype with the default kernel: the exact rollout
    base = _name(*candidates[0])
    best = base
    for name, speed in speeds.items():
        if speed >= MARGIN * speeds[base] and speed > speeds[best]:
            best = name
    engine, dtype, *kernel = best.split("/")
    return RolloutChoice(engine, dtype, source, speeds, kernel[0] if kernel else "auto")


def default_choice(cfg) -> RolloutChoice:
    """What ``auto`` is without a measurement: ``hf`` in the model's dtype (the calibration off, Ray
    actors, several torchrun ranks, which must not each choose for themselves)."""
    r = cfg.rollout
    return RolloutChoice("hf" if r.engine == "auto" else r.engine, cfg.model.dtype if r.dtype == "auto" else r.dtype,
                         "default" if "auto" in (r.engine, r.dtype, r.decode_gemm) else "fixed", gemm=r.decode_gemm)


def resolved_config(cfg, choice: RolloutChoice):
    """``cfg`` with ``rollout.engine`` / ``rollout.dtype`` set to the choice (``auto`` kept when the
    calibration is off, so such a run is the run it was before ``auto`` existed)."""
    if choice.source == "default":
        return cfg
    rollout = cfg.rollout.model_copy(update={"engine": choice.engine, "dtype": choice.dtype, "decode_gemm": choice.gemm})
    return cfg.model_copy(update={"rollout": rollout})


def record(choice: RolloutChoice) -> dict:
    """The choice as ``run_info.json`` keeps it (``rollout``); :func:`recorded` reads it back."""
    return asdict(choice)


def recorded(run_dir: str | os.PathLike) -> Optional[RolloutChoice]:
    """The rollout choice a run recorded in its ``run_info.json`` (source ``resumed``), or None when the
    run has none (not started, or from before the choice was recorded)."""
    try:
        rec = json.loads((Path(run_dir) / "run_info.json").read_text()).get("rollout")
    except (OSError, ValueError, AttributeError):
        return None
    if not rec or "engine" not in rec or "dtype" not in rec:
        return None
    return RolloutChoice(rec["engine"], rec["dtype"], "resumed", rec.get("speeds", {}), rec.get("gemm", "auto"))
