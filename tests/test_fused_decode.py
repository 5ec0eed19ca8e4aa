"""The fused Llama-family decode: the same tokens and log-probs as the model's own forward (fp32,
within fp32 rounding of the trainer's log-prob pass, tests/numerics.py), LoRA adapters merged, weights rebuilt after an update,
packed GEMMs bit-identical to ``F.linear`` (MKL's) or equal to rounding (oneDNN's), each decode GEMM kernel
(``rollout.decode_gemm``) against the model's forward, and on-policy ratios exactly 1 with a bf16 rollout."""
import pytest
import torch
from numerics import fp_tol
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

from satseq.rollout import fused_decode
from satseq.rollout.hf_engine import HFEngine
from satseq.rollout.logprobs import response_logprobs
from satseq.rollout.types import SamplingParams


def _enc(tok, s):
    return tok(s, add_special_tokens=False)["input_ids"]


PROMPTS = ["347+589=", "12+5=", "1=", "0936|0926|12+5=", "77+7="]


def _small_llama(vocab: int, pad: int, eos: int, bias: bool = False):
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=160, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      tie_word_embeddings=False, attention_bias=bias, pad_token_id=pad, eos_token_id=eos,
                      rope_theta=10000.0)
    return LlamaForCausalLM(cfg).eval()


def _max_gap(model, tok, gens):
    """The largest gap between the engine's and the trainer's log-probs, in units of the fp32 rounding
    tolerance at their magnitude (tests/numerics.py): ≤ 1 is agreement to rounding."""
    lp, _ = response_logprobs(model, [g.prompt_ids for g in gens], [g.response_ids for g in gens], tok.pad_token_id)
    lp = lp.detach()
    return max(float((lp[i, : len(g.logprobs)] - torch.tensor(g.logprobs)).abs().max()) / fp_tol(lp[i, : len(g.logprobs)])
               for i, g in enumerate(gens))


def _gemm(gemm):
    if gemm not in fused_decode.available_gemms(torch.float32, "cpu"):
        pytest.skip(f"no {gemm} decode GEMM in this torch build")
    return gemm


@pytest.mark.numerics
@pytest.mark.parametrize("gemm", fused_decode.GEMMS)
@pytest.mark.parametrize("arch", ["qwen2", "llama", "llama_bias"])
def test_fused_decode_equals_the_models_forward(tiny, arch, gemm):
    model, tok = tiny
    if arch != "qwen2":
        model = _small_llama(len(tok), tok.pad_token_id, tok.eos_token_id, bias=arch == "llama_bias")
    assert fused_decode.supports(model)
    prompts = [_enc(tok, p) for p in PROMPTS] * 3
    sp = SamplingParams(max_new_tokens=20)
    engine = HFEngine(tok, fused=True, gemm=_gemm(gemm))
    fused = engine.generate(model, prompts, sp, torch.Generator().manual_seed(0))
    assert engine._weights.get(model, torch.float32, rows=len(prompts), gemm=gemm).gemm == gemm
    plain = HFEngine(tok, fused=False).generate(model, prompts, sp, torch.Generator().manual_seed(0))
    assert [g.response_ids for g in fused] == [g.response_ids for g in plain]
    assert _max_gap(model, tok, fused) <= 1  # the trainer's log-prob pass, in the loss precision (fp32)
    assert len({tuple(g.response_ids) for g in fused}) > 3


@pytest.mark.numerics
def test_lora_adapters_are_merged_and_an_update_rebuilds_the_weights(tiny):
    from peft import LoraConfig, get_peft_model

    base, tok = tiny
    import copy

    peft_model = get_peft_model(copy.deepcopy(base), LoraConfig(r=4, lora_alpha=8, target_modules=[
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "down_proj"], init_lora_weights=False),
        adapter_name="first")
    peft_model.add_adapter("second", LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                           init_lora_weights=False))
    peft_model.eval()
    prompts = [_enc(tok, p) for p in PROMPTS]
    sp = SamplingParams(max_new_tokens=12, temperature=0)
    eng = HFEngine(tok)
    outs = {}
    for name in ("first", "second"):
        peft_model.set_adapter(name)
        outs[name] = eng.generate(peft_model, prompts, sp)
        ref = HFEngine(tok, fused=False).generate(peft_model, prompts, sp)
        assert [g.response_ids for g in outs[name]] == [g.response_ids for g in ref]
        assert _max_gap(peft_model, tok, outs[name]) <= 1
    with torch.no_grad():  # an in-place update, as the optimizer makes
        for n, p in peft_model.named_parameters():
            if "lora_B" in n and ".second." in n:
                p.mul_(-3.0)
    after = eng.generate(peft_model, prompts, sp)
    fresh = HFEngine(tok).generate(peft_model, prompts, sp)
    assert [g.logprobs for g in after] == [g.logprobs for g in fresh]
    assert [g.logprobs for g in after] != [g.logprobs for g in outs["second"]]


@pytest.mark.skipif(not fused_decode._mkl_packs(torch.float32, "cpu"), reason="no MKL packed GEMM in this build")
def test_packed_gemm_is_bit_identical_to_linear():
    w, b = torch.randn(96, 64), torch.randn(96)
    lin = fused_decode.Lin(w, b, pack_rows=8)
    for rows in (1, 8, 13):
        x = torch.randn(rows, 1, 64)
        assert torch.equal(lin(x, decode=True), F.linear(x, w, b))


@pytest.mark.skipif("onednn" not in fused_decode.available_gemms(torch.float32, "cpu"), reason="no oneDNN packed linear")
def test_onednn_packed_linear_is_linear_to_rounding_and_the_same_for_a_row_whatever_the_batch():
    w, b = torch.randn(96, 64), torch.randn(96)
    lin = fused_decode.Lin(w, b, pack_rows=8, kernel="onednn")
    x = torch.randn(13, 1, 64)
    whole = lin(x, decode=True)
    assert torch.allclose(whole, F.linear(x, w, b), rtol=0, atol=fp_tol(F.linear(x, w, b)))
    for rows in (1, 8, 12):
        assert torch.equal(lin(x[:rows], decode=True), whole[:rows])


def test_an_unknown_or_missing_kernel(tiny):
    assert fused_decode.resolve_gemm("auto", torch.float32, "cpu") == fused_decode.available_gemms(torch.float32, "cpu")[0]
    assert fused_decode.resolve_gemm("mkl", torch.float32, "meta") == "torch"  # no packing off the CPU
    with pytest.raises(ValueError, match="unknown decode GEMM kernel"):
        fused_decode.resolve_gemm("cublas", torch.float32, "cpu")


def test_bf16_rollout_keeps_on_policy_ratios_exactly_one(tiny):
    """The trainer re-scores a bf16 rollout in fp32: the loss's ratio is exactly 1 before the first
    step, the clip fraction 0, and the engine-vs-trainer gap is reported."""
    from satseq.algos import get_loss
    from satseq.records import Episode, Problem, Turn
    from satseq.update.batch import batch_logprobs, turns_of
    from satseq.update.clipped_pg import behaviour_gap

    model, tok = tiny
    prompts = [_enc(tok, p) for p in PROMPTS] * 2
    gens = HFEngine(tok, dtype=torch.bfloat16).generate(model, prompts, SamplingParams(max_new_tokens=12),
                                                        torch.Generator().manual_seed(1))
    episodes = []
    for i, g in enumerate(gens):
        ep = Episode(problem=Problem(problem_id=str(i), problem="", answer="0"), group=i)
        ep.turns.append(Turn.from_generation(g, role="a", agent="a", index=0, prompt_text="", answer=None))
        episodes.append(ep)
    batch = turns_of(episodes, "a", torch.randn(len(gens), 1))
    lp, m = batch_logprobs(model, batch, tok.pad_token_id, temperature=1.0, device="cpu", grad=True)
    old = lp.detach()  # on-policy: the trainer's own log-probs, in the loss precision
    assert torch.equal(torch.exp(lp - old)[m.bool()], torch.ones(int(m.sum())))
    _, metrics = get_loss("ppo")(lp, old, batch.advantages, m, clip_low=0.2, clip_high=0.2, agg_mode="token-mean")
    assert float(metrics["clipfrac"]) == 0.0
    gap = behaviour_gap(lp, m, batch.behaviour_logprobs)
    assert 1e-4 < gap < 0.5  # bf16 sampling is close to, and not the same as, the fp32 policy


@pytest.mark.numerics
@pytest.mark.parametrize("gemm", fused_decode.GEMMS)
def test_finished_rows_are_dropped_without_changing_any_row(tiny, monkeypatch, gemm):
    model, tok = tiny
    prompts = [_enc(tok, p) for p in PROMPTS] * 4
    sp = SamplingParams(max_new_tokens=30, stop=tuple("aeiou0123"))  # rows end at different steps
    kept = []
    original = fused_decode.FusedDecoder.keep_rows
    monkeypatch.setattr(fused_decode.FusedDecoder, "keep_rows",
                        lambda self, idx: (kept.append(len(idx)), original(self, idx))[1])
    fused = HFEngine(tok, gemm=_gemm(gemm)).generate(model, prompts, sp, torch.Generator().manual_seed(2))
    plain = HFEngine(tok, fused=False).generate(model, prompts, sp, torch.Generator().manual_seed(2))
    assert kept and kept[0] <= len(prompts) // 2
    assert [g.response_ids for g in fused] == [g.response_ids for g in plain]
    assert [g.finish_reason for g in fused] == [g.finish_reason for g in plain]
    assert _max_gap(model, tok, fused) <= 1
    assert len({len(g.response_ids) for g in fused}) > 3


def test_common_prefix_of_left_padded_prompts_by_hand():
    ids = torch.tensor([[0, 0, 5, 6, 7, 8], [5, 6, 7, 9, 1, 2], [0, 5, 6, 7, 8, 3]])
    mask = (ids != 0).long()
    assert fused_decode.common_prefix(ids, mask) == 3  # 5 6 7, then 8 / 9 / 8
    same = torch.tensor([[0, 5, 6, 7], [5, 6, 7, 8]])
    assert fused_decode.common_prefix(same, (same != 0).long()) == 2  # the shorter keeps a token of its own
    assert fused_decode.common_prefix(torch.tensor([[1, 2], [3, 2]]), torch.ones(2, 2)) == 0


@pytest.mark.numerics
@pytest.mark.parametrize("gemm", ["torch", "auto"])
@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_a_shared_few_shot_header_is_prefilled_once_without_changing_any_row(tiny, monkeypatch, arch, gemm):
    """Distinct prompts opening with the same header (a few-shot prompt): the header is prefilled once and
    the rows' tokens, finish reasons and log-probs are those of the plain forward (to fp32 rounding)."""
    model, tok = tiny
    if arch != "qwen2":
        model = _small_llama(len(tok), tok.pad_token_id, tok.eos_token_id)
    header = "111+222=333|404+505=909|"
    prompts = [_enc(tok, header + p) for p in PROMPTS] * 3  # rests of different lengths, each prompt thrice
    shared = []
    original = fused_decode.FusedDecoder._prefill_shared
    monkeypatch.setattr(fused_decode.FusedDecoder, "_prefill_shared",
                        lambda self, *a: (shared.append(a[4]), original(self, *a))[1])
    sp = SamplingParams(max_new_tokens=24, stop=tuple("aeiou0"))
    gemm = gemm if gemm == "auto" else _gemm(gemm)
    fused = HFEngine(tok, gemm=gemm).generate(model, prompts, sp, torch.Generator().manual_seed(3))
    plain = HFEngine(tok, fused=False).generate(model, prompts, sp, torch.Generator().manual_seed(3))
    assert shared and shared[0] >= len(_enc(tok, header)) >= fused_decode.MIN_SHARED_PREFIX
    assert [g.response_ids for g in fused] == [g.response_ids for g in plain]
    assert [g.finish_reason for g in fused] == [g.finish_reason for g in plain]
    assert _max_gap(model, tok, fused) <= 1
    assert len({tuple(g.response_ids) for g in fused}) > 3
