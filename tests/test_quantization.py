"""``model.quantization`` (int8 / nf4 bases through bitsandbytes, LoRA adapters on them): the refusals,
satseq's engine on a quantized base, a LoRA GRPO run on an int8 base that resumes exactly, an adapter
trained on int8 loaded on the fp32 base, and, on SmolLM2 (slow), the log-probs' distance from fp32.

The tolerances of the SmolLM2 tests are measured, not guessed: quantization error is a property of the
weights (bitsandbytes rounds them the same way on every CPU), so the figures below move only by rounding
between CPUs; each bound leaves about 1.5x the measured value."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch
import warm_cli
from numerics import fp_tol

from satseq.errors import ConfigError

bnb = pytest.importorskip("bitsandbytes", reason="bitsandbytes is not installed (make setup installs it)")

FAST = ["trainer.train_batch_size=2", "grpo.group_size=2", "rollout.max_new_tokens=6", "data.train_size=8",
        "data.eval_size=2", "threads=1", "trainer.tensorboard=false", "trainer.progress=false"]


def _cfg(*overrides):
    from satseq.config import load_config

    return load_config(None, ["method=grpo", *overrides])


# ------------------------------------------------------------------------------------------ refusals
@pytest.mark.parametrize("overrides, says", [
    (["model.lora.enabled=false"], "full fine-tuning"),
    (["model.lora.enabled=auto"], "embedded model is fully fine-tuned"),
    (["model.lora.enabled=true", "trainer.strategy=fsdp2"], "fsdp2"),
    (["model.lora.enabled=true", "rollout.engine=vllm"], "rollout.engine=vllm"),
    (["model.lora.enabled=true", "rollout.dtype=bfloat16"], "rollout.dtype=bfloat16"),
    (["model.lora.enabled=true", "rollout.decode_gemm=mkl"], "fused decode"),
])
@pytest.mark.parametrize("q", ["int8", "nf4"])
def test_what_a_quantized_base_cannot_run_with_is_one_line_naming_the_key(q, overrides, says):
    with pytest.raises(ConfigError) as e:
        _cfg(f"model.quantization={q}", *overrides)
    msg = str(e.value)
    assert msg.startswith("config key 'model.quantization': ") and says in msg and "\n" not in msg


def test_the_same_settings_are_accepted_without_quantization_and_lora_with_it():
    for overrides in (["model.lora.enabled=false"], ["trainer.strategy=fsdp2"], ["rollout.engine=vllm"],
                      ["rollout.dtype=bfloat16"]):
        _cfg(*overrides)  # no error
    assert _cfg("model.quantization=int8", "model.lora.enabled=true").model.quantization == "int8"
    with pytest.raises(ConfigError, match="model.quantization"):
        _cfg("model.quantization=int4")


def test_the_seeds_load_in_8bit_flag_names_a_quantization():
    from satseq.models.quantize import from_seed_flags

    assert [from_seed_flags(), from_seed_flags(load_in_8bit=True), from_seed_flags(load_in_4bit=True)] == \
        ["none", "int8", "nf4"]
    with pytest.raises(ConfigError, match="choose one"):
        from_seed_flags(True, True)


def test_an_embedded_format_directory_with_lora_auto_is_refused(tiny_dir):
    with pytest.raises(ConfigError, match="embedded model is fully fine-tuned"):
        _cfg("model.quantization=int8", f"model.path={tiny_dir}")


# ------------------------------------------------------------------------------ the tiny model, quantized
@pytest.fixture(scope="module", params=["int8", "nf4"])
def quantized_pool(request, tiny_dir):
    from satseq.models.agents import AgentPool
    from satseq.models.loading import load_causal_lm

    base, tok = load_causal_lm(tiny_dir, quantization=request.param)
    return request.param, AgentPool.lora(["a", "b"], base, tok, r=4, alpha=8, dropout=0.0)


def test_the_linear_layers_are_bitsandbytes_ones_and_only_lora_trains(quantized_pool):
    from satseq.models.quantize import is_quantized, quantization_of

    q, pool = quantized_pool
    m = pool.module("a")
    kinds = {type(mod.base_layer).__name__ for name, mod in m.named_modules() if name.endswith("q_proj")}
    assert kinds == {"Linear8bitLt" if q == "int8" else "Linear4bit"}
    assert is_quantized(m) and quantization_of(m) == q
    assert all(("lora_" in n) == p.requires_grad for n, p in m.named_parameters())
    head = m.get_base_model().get_output_embeddings()
    assert type(head) is torch.nn.Linear and head.weight.dtype == torch.float32  # the LM head stays dense


@pytest.mark.numerics
def test_the_engine_rolls_out_from_the_quantized_base_and_gradients_reach_every_layer(quantized_pool):
    """satseq's engine on a quantized base: the model's own forward (the fused decode reads dense weights);
    nf4's rollout log-probs are the trainer's; after a rollout, the backward still reaches every layer's
    adapters (bitsandbytes' bf16 CPU path, which has no autograd, is kept off: satseq.models.quantize)."""
    from satseq.config import load_config
    from satseq.rollout.logprobs import response_logprobs
    from satseq.rollout.types import SamplingParams
    from satseq.runtime import run_engine

    q, pool = quantized_pool
    m = pool.module("a")
    tok = pool.tokenizer
    cfg = load_config(None, ["method=grpo", f"model.quantization={q}", "model.lora.enabled=true", "rollout.engine=hf"])
    engine = run_engine(cfg, tok, "cpu")
    assert engine.fused is False  # the run's engine decodes a quantized base through the model's own forward
    prompts = [tok("12+34=")["input_ids"], tok("7+8=")["input_ids"], tok("100+1=")["input_ids"]]
    gens = engine.generate(m, prompts, SamplingParams(max_new_tokens=5, temperature=1.0),
                           torch.Generator().manual_seed(0))
    from satseq.rollout.engine import make_engine

    # an engine made with the fused decode on (satseq eval's, a bench's) decodes the quantized base the same way
    again = make_engine("hf", tok, batch_size=4).generate(m, prompts, SamplingParams(max_new_tokens=5, temperature=1.0),
                                                         torch.Generator().manual_seed(0))
    assert [g.response_ids for g in again] == [g.response_ids for g in gens]
    assert all(len(g.response_ids) for g in gens)
    with torch.no_grad():
        lp, mask = response_logprobs(m, prompts, [g.response_ids for g in gens], tok.pad_token_id)
    behaviour = torch.zeros_like(lp)
    for i, g in enumerate(gens):
        behaviour[i, :len(g.logprobs)] = torch.tensor(g.logprobs)
    gap = float(((lp - behaviour) * mask).abs().max())
    if q == "nf4":  # dequantize + F.linear: the same numbers in any batch layout
        assert gap <= fp_tol(lp, behaviour), gap
    else:  # LLM.int8's outlier columns depend on the batch (rollout.is_correction=auto weights it)
        assert gap < 1.0, gap
    m.train()
    try:
        lp, mask = response_logprobs(m, prompts, [g.response_ids for g in gens], tok.pad_token_id)
        (-(lp * mask).sum()).backward()
        lora_b = {n: p.grad for n, p in pool.named_trainable("a").items() if "lora_B" in n}
        assert lora_b and all(g is not None and float(g.abs().sum()) > 0 for g in lora_b.values()), \
            [n for n, g in lora_b.items() if g is None or float(g.abs().sum()) == 0][:4]
    finally:
        m.eval()
        for p in pool.parameters("a"):
            p.grad = None


def test_is_correction_auto_weights_int8_rollouts_only():
    from satseq.update.engine_correction import EngineCorrection

    assert EngineCorrection.from_config(_cfg("model.quantization=int8", "model.lora.enabled=true")).on
    assert not EngineCorrection.from_config(_cfg("model.quantization=nf4", "model.lora.enabled=true")).on
    assert not EngineCorrection.from_config(_cfg()).on


def test_rollout_choice_is_satseqs_engine_in_the_model_dtype_without_measuring(quantized_pool, monkeypatch):
    from satseq.rollout import choice

    q, pool = quantized_pool
    monkeypatch.setenv(choice.SWITCH_ENV, "on")
    cfg = _cfg(f"model.quantization={q}", "model.lora.enabled=true")
    picked = choice.choose(cfg, pool.module("a"), pool.tokenizer, "cpu", measure_fn=lambda *a: pytest.fail("measured"))
    assert (picked.engine, picked.dtype, picked.source) == ("hf", "float32", "fixed")


# ------------------------------------------------------------------------------ training and resuming
def _train(args, env=None):
    e = dict(os.environ, **(env or {}))
    return warm_cli.run([sys.executable, "-m", "satseq.cli", "train", *args], env=e, timeout=600)


def _metrics(run_dir: Path):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def _adapter_logprobs(base, adapter_dir, prompts, responses, pad_id):
    from peft import PeftModel

    from satseq.rollout.logprobs import response_logprobs

    model = PeftModel.from_pretrained(base, str(adapter_dir)).eval()
    with torch.no_grad():
        return response_logprobs(model, prompts, responses, pad_id)


def _grpo_int8_trains_and_resumes(model_args, tmp_path, extra=()):
    """2 stages of GRPO with LoRA on an int8 base; a run killed after stage 1 and resumed writes the same
    metrics (the exact-resume contract of tests/test_train_e2e.py), and the same run on the fp32 base does
    not (the base the run trained on was the int8 one). Returns the full run's directory."""
    common = [*model_args, "method=grpo", "model.lora.enabled=true", "model.lora.r=4", "trainer.num_stages=2",
              "trainer.save_every=1", "ppo.lr=1e-3", *FAST, *extra]
    full = _train([*common, "model.quantization=int8", f"output_dir={tmp_path}/a", "run_name=g"])
    assert full.returncode == 0, full.stderr[-3000:]
    run = tmp_path / "a" / "g"
    ref = _metrics(run)
    assert [r["step"] for r in ref] == [0, 1] and all("policy/loss" in r for r in ref)
    assert all("policy/is_engine_mean" in r for r in ref)  # rollout.is_correction=auto weights int8 rollouts
    dense = _train([*common, f"output_dir={tmp_path}/fp32", "run_name=g"])
    assert dense.returncode == 0, dense.stderr[-3000:]
    fp32 = _metrics(tmp_path / "fp32" / "g")
    # stage 1's rollout (before any update, so the config's other differences have not acted yet)
    assert fp32[0]["policy/sampled_entropy"] != ref[0]["policy/sampled_entropy"]
    common.append("model.quantization=int8")
    assert json.loads((run / "run_info.json").read_text())["mode"] == "lora"
    from safetensors.torch import load_file

    b = [v for k, v in load_file(str(run / "policy_stage_2" / "adapter_model.safetensors")).items() if "lora_B" in k]
    assert b and any(float(v.abs().max()) > 0 for v in b), "the adapter did not move"
    killed = _train([*common, f"output_dir={tmp_path}/b", "run_name=g"], env={"SATSEQ_KILL_AT_STAGE": "1"})
    assert killed.returncode != 0
    assert [r["step"] for r in _metrics(tmp_path / "b" / "g")] == [0]
    resumed = _train([*common, f"output_dir={tmp_path}/b", "run_name=g"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming" in resumed.stdout + resumed.stderr
    assert _metrics(tmp_path / "b" / "g") == ref
    return run


def test_grpo_lora_on_an_int8_tiny_base_trains_resumes_and_its_adapter_loads_on_fp32(tmp_path):
    """The tiny model saved with a chat-format config (not the embedded format, which fine-tunes fully)."""
    from satseq.models.loading import load_causal_lm
    from satseq.models.tiny import build_tiny_model, save_model_dir

    model, tok = build_tiny_model(seed=2)
    model.config.satseq_prompt_format = "chat"
    base_dir = save_model_dir(model, tok, tmp_path / "tiny_chat")
    run = _grpo_int8_trains_and_resumes([f"model.path={base_dir}", "data.train=embedded", "data.eval=embedded",
                                         "reward.custom=tests.reward_fixtures:char_code_sum"], tmp_path)
    adapter = run / "policy_stage_2"
    prompts = [tok("12+34=")["input_ids"], tok("5+5=")["input_ids"]]
    responses = [tok("46")["input_ids"], tok("10")["input_ids"]]
    fp32, _ = load_causal_lm(base_dir)
    lp32, mask = _adapter_logprobs(fp32, adapter, prompts, responses, tok.pad_token_id)
    q8, _ = load_causal_lm(base_dir, quantization="int8")
    lp8, _ = _adapter_logprobs(q8, adapter, prompts, responses, tok.pad_token_id)
    assert torch.isfinite(lp32).all()
    # the adapter's own effect survives the move: fp32 base + adapter differs from the fp32 base alone
    fp32_plain, _ = load_causal_lm(base_dir)
    from satseq.rollout.logprobs import response_logprobs

    with torch.no_grad():
        lp_base, _ = response_logprobs(fp32_plain, prompts, responses, tok.pad_token_id)
    assert float(((lp32 - lp_base) * mask).abs().max()) > 0
    assert float(((lp32 - lp8) * mask).abs().mean()) < 0.1


# ------------------------------------------------------------------------------------- SmolLM2 (slow)
TEXT = ("Question: Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
        "How many clips did Natalia sell altogether in April and May?\nAnswer: In May she sold 48 / 2 = 24 clips. "
        "Altogether she sold 48 + 24 = 72 clips. The answer is 72.")
# measured on SmolLM2-135M-Instruct (the Q4_1 GGUF dequantized to fp32), this text's 82 predicted tokens,
# AMD EPYC (AVX-512): mean |Δ log p| int8 0.090, nf4 0.459; mean KL(fp32 || quantized) int8 0.014, nf4 0.226
# nats per token; top-1 agreement int8 0.915, nf4 0.805. With ATEN_CPU_CAPABILITY=avx2: int8 the same to
# 3 digits, nf4 0.461, 0.226, top-1 0.780 (one flipped argmax moves top-1 by 0.012). For scale, bf16 weights:
# mean |Δ log p| 0.025
TOL = {"int8": {"mean_abs": 0.14, "kl": 0.025, "top1": 0.85}, "nf4": {"mean_abs": 0.70, "kl": 0.35, "top1": 0.70}}


@pytest.fixture(scope="module")
def smollm2_fp32():
    pytest.importorskip("gguf")
    from satseq.models.loading import load_causal_lm, smollm2_gguf_path

    try:
        smollm2_gguf_path()
    except Exception as e:
        pytest.skip(str(e))
    return load_causal_lm("smollm2")


def _full_logprobs(model, ids):
    with torch.no_grad():
        return torch.log_softmax(model(ids).logits.float(), -1)[0, :-1]


@pytest.mark.slow  # not numerics: the real model stays out of the second kernel path's run (make test-kernel-path)
@pytest.mark.parametrize("q", ["int8", "nf4"])
def test_smollm2_quantized_logprobs_are_close_to_fp32(smollm2_fp32, q):
    from satseq.models.quantize import quantize_plain

    model, tok = smollm2_fp32
    qmodel = quantize_plain(model, q).eval()
    ids = tok(TEXT, return_tensors="pt")["input_ids"]
    a, b = _full_logprobs(model, ids), _full_logprobs(qmodel, ids)
    tgt = ids[0, 1:, None]
    d = (a.gather(-1, tgt) - b.gather(-1, tgt)).abs().squeeze(-1)
    kl = (a.exp() * (a - b)).sum(-1)
    top1 = float((a.argmax(-1) == b.argmax(-1)).float().mean())
    print(f"\nsmollm2 {q}: mean |dlogp| {d.mean():.3f} (max {d.max():.3f}), mean KL {kl.mean():.4f}, top-1 {top1:.3f}")
    tol = TOL[q]
    assert float(d.mean()) < tol["mean_abs"] and float(kl.mean()) < tol["kl"] and top1 > tol["top1"]
    assert float(d.mean()) > 1e-4  # it is quantized, not the fp32 model again


@pytest.mark.slow
def test_smollm2_grpo_lora_on_int8_trains_resumes_and_its_adapter_loads_on_fp32(smollm2_fp32, tmp_path,
                                                                                monkeypatch):
    model, tok = smollm2_fp32
    # the training processes read the dequantized GGUF from a cache in tmp_path, filled here first, so that
    # every run loads the same way (the first one would otherwise parse the GGUF, the others read the cache)
    monkeypatch.setenv("SATSEQ_GGUF_CACHE", "1")
    monkeypatch.setenv("SATSEQ_CACHE_DIR", str(tmp_path / "cache"))
    from satseq.models.loading import load_causal_lm

    load_causal_lm("smollm2")
    run = _grpo_int8_trains_and_resumes(
        ["model.path=smollm2", "data.train=embedded", "data.eval=embedded", "rollout.max_new_tokens=4",
         "reward.custom=tests.reward_fixtures:char_code_sum"], tmp_path)
    prompts = [tok("What is 12+34?")["input_ids"]]
    responses = [tok(" 46")["input_ids"]]
    lp32, _ = _adapter_logprobs(model, run / "policy_stage_2", prompts, responses, tok.pad_token_id)
    assert torch.isfinite(lp32).all()
