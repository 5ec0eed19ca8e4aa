"""The trainer's forward projects only the positions that predict response tokens onto the
vocabulary (``logits_to_keep``); the log-probs are those of the full forward."""
import torch

from satseq.rollout import logprobs as lpmod
from satseq.rollout.padding import prompt_response_batch


def test_response_logprobs_equal_the_full_forward_slice(tiny, monkeypatch):
    model, tok = tiny
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 40, (n,), generator=g).tolist() for n in (5, 9, 7)]
    responses = [torch.randint(3, 40, (n,), generator=g).tolist() for n in (4, 1, 6)]
    seen = []
    real = lpmod.last_logits_only
    monkeypatch.setattr(lpmod, "last_logits_only", lambda m, n=1: seen.append(n) or real(m, n))
    lp, mask = lpmod.response_logprobs(model, prompts, responses, tok.pad_token_id, temperature=0.7)
    assert seen == [7]  # R + 1 positions reach the LM head, not the 9 + 6 of the whole row
    ids, am, pos, start, r_mask = prompt_response_batch(prompts, responses, tok.pad_token_id)
    with torch.no_grad():
        full = model(input_ids=ids, attention_mask=am, position_ids=pos, use_cache=False).logits
    ref = torch.log_softmax(full[:, start - 1:start - 1 + r_mask.shape[1]] / 0.7, -1)
    for i, r in enumerate(responses):
        want = ref[i, torch.arange(len(r)), torch.tensor(r)]
        torch.testing.assert_close(lp[i, :len(r)], want, rtol=0, atol=1e-5)
        assert lp[i, len(r):].abs().sum() == 0 and mask[i].sum() == len(r)
