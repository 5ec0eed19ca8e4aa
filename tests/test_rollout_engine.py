"""The transformers engine: behaviour log-probs equal the trainer's recomputation under left
padding, stop strings and EOS end responses, a seed fixes the samples."""
import pytest
import torch
from numerics import fp_tol

from satseq.rollout.hf_engine import HFEngine, sample_next
from satseq.rollout.logprobs import response_logprobs
from satseq.rollout.types import SamplingParams


def _enc(tok, s):
    return tok(s, add_special_tokens=False)["input_ids"]


@pytest.mark.numerics
def test_behaviour_logprobs_match_training_forward_with_left_padding(tiny):
    model, tok = tiny
    prompts = [_enc(tok, "347+589="), _enc(tok, "0936|0926|12+5="), _enc(tok, "1=")]
    eng = HFEngine(tok, batch_size=8)
    gens = eng.generate(model, prompts * 3, SamplingParams(max_new_tokens=20), torch.Generator().manual_seed(0))
    lp, mask = response_logprobs(model, [g.prompt_ids for g in gens], [g.response_ids for g in gens], tok.pad_token_id)
    for i, g in enumerate(gens):
        assert mask[i].sum() == len(g.response_ids)
        assert torch.allclose(lp[i, : len(g.logprobs)], torch.tensor(g.logprobs), atol=fp_tol(lp[i]), rtol=0)
    # a prompt's log-probs do not depend on how much padding its batch needed
    alone, _ = response_logprobs(model, [gens[2].prompt_ids], [gens[2].response_ids], tok.pad_token_id)
    assert torch.allclose(alone[0, : len(gens[2].response_ids)], lp[2, : len(gens[2].response_ids)], atol=fp_tol(lp[2]), rtol=0)


def test_seed_fixes_samples_and_greedy_is_deterministic(tiny):
    model, tok = tiny
    eng = HFEngine(tok)
    prompts = [_enc(tok, "347+589=")] * 4
    a = eng.generate(model, prompts, SamplingParams(max_new_tokens=12), torch.Generator().manual_seed(3))
    b = eng.generate(model, prompts, SamplingParams(max_new_tokens=12), torch.Generator().manual_seed(3))
    c = eng.generate(model, prompts, SamplingParams(max_new_tokens=12), torch.Generator().manual_seed(4))
    assert [g.response_ids for g in a] == [g.response_ids for g in b]
    assert [g.response_ids for g in a] != [g.response_ids for g in c]
    g1 = eng.generate(model, prompts[:1], SamplingParams(max_new_tokens=12, temperature=0))
    g2 = eng.generate(model, prompts[:1], SamplingParams(max_new_tokens=12, temperature=0))
    assert g1[0].response_ids == g2[0].response_ids and len(g1[0].response_ids) == 12
    assert g1[0].finish_reason == "length"


def test_stop_string_and_eos_end_a_response(tiny):
    model, tok = tiny
    eng = HFEngine(tok)
    logits_for = {}

    class Forced(torch.nn.Module):
        """Always predicts the next char of a fixed string, then EOS."""

        def __init__(self, text):
            super().__init__()
            self.ids = _enc(tok, text) + [tok.eos_token_id]
            self.config = model.config

        def forward(self, input_ids, attention_mask, position_ids, past_key_values=None, use_cache=True):
            n_gen = attention_mask.shape[1] - self.prompt_len
            nxt = self.ids[min(n_gen, len(self.ids) - 1)]
            logits = torch.full((input_ids.shape[0], input_ids.shape[1], len(tok)), -30.0)
            logits[:, -1, nxt] = 30.0
            return type("Out", (), {"logits": logits})()

    forced = Forced("ab;cd")
    prompt = _enc(tok, "x=")
    forced.prompt_len = len(prompt)
    g = eng.generate(forced, [prompt], SamplingParams(max_new_tokens=10, stop=(";",)))[0]
    assert g.text == "ab;" and g.finish_reason == "stop"
    g = eng.generate(forced, [prompt], SamplingParams(max_new_tokens=10))[0]
    assert g.text == "ab;cd" and g.finish_reason == "eos" and g.response_ids[-1] == tok.eos_token_id
    g = eng.generate(forced, [prompt], SamplingParams(max_new_tokens=2))[0]
    assert g.text == "ab" and g.finish_reason == "length"


def test_top_p_keeps_only_the_nucleus():
    logits = torch.log(torch.tensor([[0.6, 0.3, 0.05, 0.05]])).repeat(2000, 1)
    gen = torch.Generator().manual_seed(0)
    tok, lp = sample_next(logits, SamplingParams(top_p=0.8), gen)
    assert set(tok.tolist()) == {0, 1}
    assert torch.allclose(lp[tok == 0], torch.log(torch.tensor(0.6)), atol=1e-5)
    tok, _ = sample_next(logits, SamplingParams(), gen)
    freq = torch.bincount(tok, minlength=4).float() / len(tok)
    assert torch.allclose(freq, torch.tensor([0.6, 0.3, 0.05, 0.05]), atol=0.04)


@pytest.mark.numerics
def test_prefill_projects_only_the_last_position_and_samples_the_same(tiny, monkeypatch):
    """logits_to_keep=1 in the prefill of the model's-own-forward path (``fused=False``; the fused
    path projects the last position only by construction): the logits tensor is [B, 1, V], and the
    generations are the same as with the full [B, T, V] projection."""
    import satseq.rollout.hf_engine as hfe
    from satseq.rollout.hf_engine import HFEngine
    from satseq.rollout.types import SamplingParams

    model, tok = tiny
    prompts = [tok("123+456=", add_special_tokens=False)["input_ids"], tok("9+9=", add_special_tokens=False)["input_ids"]]
    shapes = []
    hook = model.register_forward_hook(lambda m, a, out: shapes.append(tuple(out.logits.shape)))
    try:
        sp = SamplingParams(max_new_tokens=6, temperature=1.0)
        fast = HFEngine(tok, fused=False).generate(model, prompts, sp, torch.Generator().manual_seed(3))
        monkeypatch.setattr(hfe, "last_logits_only", lambda m: {})
        shapes_fast, shapes[:] = list(shapes), []
        full = HFEngine(tok, fused=False).generate(model, prompts, sp, torch.Generator().manual_seed(3))
    finally:
        hook.remove()
    assert shapes_fast[0] == (2, 1, len(tok)) and shapes[0] == (2, len(prompts[0]), len(tok))
    assert [g.response_ids for g in fast] == [g.response_ids for g in full]
    for a, b in zip(fast, full):
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < fp_tol(a.logprobs)


def test_two_level_inverse_cdf_equals_the_one_level_draw_and_the_distribution():
    from satseq.rollout.hf_engine import inverse_cdf

    g = torch.Generator().manual_seed(0)
    w = torch.rand(16, 49152 + 77, generator=g)  # a vocabulary that is not a multiple of the block
    u = torch.rand(16, 1, generator=g)
    one_level = torch.searchsorted(w.cumsum(-1), u * w.sum(-1, keepdim=True)).squeeze(-1)
    assert torch.equal(inverse_cdf(w, u)[0], one_level)
    p = torch.softmax(torch.randn(1, 600, generator=g) * 2, -1)
    draws = inverse_cdf(p.expand(100_000, -1).contiguous(), torch.rand(100_000, 1, generator=g))[0]
    freq = torch.bincount(draws, minlength=600).float() / 100_000
    assert (freq - p[0]).abs().max() < 0.004


def test_sampled_logprob_is_the_log_softmax_at_the_token():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(8, 3000, generator=g)
    for sp in (SamplingParams(), SamplingParams(temperature=0.7), SamplingParams(temperature=0)):
        tok, lp = sample_next(logits, sp, g)
        ref = torch.log_softmax(logits / (sp.temperature or 1.0), -1).gather(-1, tok[:, None]).squeeze(-1)
        torch.testing.assert_close(lp, ref, rtol=0, atol=fp_tol(ref))
