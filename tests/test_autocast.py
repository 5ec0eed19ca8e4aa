"""trainer.autocast=bfloat16: the decoder runs in bf16, the LM head / log-softmax and the parameters
stay fp32, and the grad and no-grad passes agree bit for bit (on-policy ratios exactly 1)."""
import pytest
import torch
from numerics import fp_tol

from satseq.rollout.logprobs import response_logprobs
from satseq.utils import precision


@pytest.fixture
def bf16_autocast():
    precision.set_autocast("bfloat16")
    yield
    precision.set_autocast("off")


def _batch(tok):
    enc = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    prompts = [enc("347+589="), enc("12+5="), enc("0936|0926|12+5=")]
    responses = [enc("936"), enc("17"), enc("17 and more")]
    return prompts, responses


def test_autocast_logprobs_are_bf16_close_and_the_two_passes_agree(tiny, bf16_autocast):
    model, tok = tiny
    prompts, responses = _batch(tok)
    with torch.no_grad():
        old, mask = response_logprobs(model, prompts, responses, tok.pad_token_id)
    new, _ = response_logprobs(model, prompts, responses, tok.pad_token_id)
    assert new.dtype == torch.float32
    assert torch.equal(new.detach(), old)  # the ratio exp(new - old) is exactly 1 on-policy
    precision.set_autocast("off")
    with torch.no_grad():
        fp32, _ = response_logprobs(model, prompts, responses, tok.pad_token_id)
    gap = ((old - fp32).abs() * mask).max()
    assert 0 < gap < 0.1  # bf16 really ran, and stayed close


def test_autocast_keeps_parameters_and_gradients_fp32(tiny, bf16_autocast):
    model, tok = tiny
    prompts, responses = _batch(tok)
    lp, mask = response_logprobs(model, prompts, responses, tok.pad_token_id)
    (-(lp * mask).sum()).backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(g.dtype == torch.float32 for g in grads)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    model.zero_grad(set_to_none=True)


@pytest.mark.numerics
def test_autocast_full_logits_come_from_an_fp32_head(tiny, bf16_autocast):
    from satseq.rollout.logprobs import response_logits

    model, tok = tiny
    prompts, responses = _batch(tok)
    with torch.no_grad():
        logits, mask = response_logits(model, prompts, responses, tok.pad_token_id)
        lp, _ = response_logprobs(model, prompts, responses, tok.pad_token_id)
    assert logits.dtype == torch.float32 and logits.shape[:2] == mask.shape
    from_logits = torch.log_softmax(logits, -1).gather(-1, torch.tensor(
        [r + [0] * (mask.shape[1] - len(r)) for r in responses])[..., None]).squeeze(-1) * mask
    torch.testing.assert_close(from_logits, lp, rtol=0, atol=fp_tol(lp))
