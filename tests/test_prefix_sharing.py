"""The trainer's forward with each distinct prompt run once (satseq/rollout/prefix_sharing.py): the same
log-probs and gradients as the one-pass forward over every row, on Qwen2 and Llama, full and LoRA,
with fewer token-positions through the decoder; the one-pass layout whenever sharing would be wrong."""
import copy

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from satseq.rollout import logprobs as lpmod
from satseq.rollout import prefix_sharing
from satseq.rollout.padding import prompt_response_batch

# 3 distinct prompts of different lengths, 2–4 rows each, in mixed order; responses of 1–6 tokens
P = [[5, 9, 13, 4, 22], [7, 8, 30, 31, 2, 6, 11, 12, 19], [3, 3, 17, 25, 26, 9, 8]]
PROMPTS = [P[0], P[1], P[0], P[2], P[1], P[0], P[2], P[0]]
RESPONSES = [[14, 15, 16, 21], [33], [6, 7, 8, 9, 10, 23], [40, 41], [33, 34, 35], [14, 15], [9], [1, 2, 3, 4, 5]]


def _one_pass(model, prompts, responses, pad_id):
    """Reference: every row's prompt and response in one forward, log-softmax over the full logits."""
    ids, am, pos, start, r_mask = prompt_response_batch(prompts, responses, pad_id)
    full = model(input_ids=ids, attention_mask=am, position_ids=pos, use_cache=False).logits
    ref = torch.log_softmax(full[:, start - 1:start - 1 + r_mask.shape[1]].float(), -1)
    rows = [torch.nn.functional.pad(ref[i, torch.arange(len(r)), torch.tensor(r)], (0, r_mask.shape[1] - len(r)))
            for i, r in enumerate(responses)]
    return torch.stack(rows)


def _llama(vocab: int, pad: int):
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=160, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      tie_word_embeddings=True, pad_token_id=pad, rope_theta=10000.0)
    return LlamaForCausalLM(cfg).eval()


def _model(tiny, arch, lora):
    base, tok = tiny
    model = copy.deepcopy(base) if arch == "qwen2" else _llama(len(tok), tok.pad_token_id)
    if lora:
        from peft import LoraConfig, get_peft_model

        torch.manual_seed(1)
        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, init_lora_weights=False,
                                                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])).eval()
    return model, tok


def _decoder_tokens(model, monkeypatch):
    """Count the token-positions every decoder call sees (B × L of its input ids)."""
    decoder, _ = lpmod._decoder_and_head(model)
    seen = []
    real = decoder.forward
    monkeypatch.setattr(decoder, "forward", lambda *a, **k: seen.append(k["input_ids"].numel()) or real(*a, **k))
    return seen


@pytest.mark.parametrize("arch,lora", [("qwen2", False), ("qwen2", True), ("llama", False), ("llama", True)])
def test_shared_prefix_logprobs_and_gradients_equal_the_one_pass_forward(tiny, monkeypatch, arch, lora):
    model, tok = _model(tiny, arch, lora)
    seen = _decoder_tokens(model, monkeypatch)
    lp, mask = lpmod.response_logprobs(model, PROMPTS, RESPONSES, tok.pad_token_id)
    # 3 distinct prompts (width 9) once, then 8 rows × (R − 1) = 5 response positions
    assert seen == [3 * 9, 8 * 5]
    ref = _one_pass(model, PROMPTS, RESPONSES, tok.pad_token_id)
    torch.testing.assert_close(lp, ref, rtol=0, atol=1e-5)
    assert mask.sum(1).tolist() == [len(r) for r in RESPONSES]
    params = [p for p in model.parameters() if p.requires_grad]
    weights = torch.arange(1, 7, dtype=torch.float32)
    g1 = torch.autograd.grad((lp * weights).sum(), params, allow_unused=True)
    g2 = torch.autograd.grad((ref * mask * weights).sum(), params, allow_unused=True)
    compared = 0
    for a, b in zip(g1, g2):
        if a is not None or b is not None:
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
            compared += 1
    assert compared >= (8 if lora else 20)  # the prompt's k/v projections get their gradient through the cache


def test_full_logits_path_shares_prefixes_too(tiny, monkeypatch):
    model, tok = _model(tiny, "llama", False)
    seen = _decoder_tokens(model, monkeypatch)
    with torch.no_grad():
        lp, mask, logits = lpmod.response_logprobs(model, PROMPTS, RESPONSES, tok.pad_token_id, return_logits=True)
        ref = _one_pass(model, PROMPTS, RESPONSES, tok.pad_token_id)
    assert seen[:2] == [3 * 9, 8 * 5]
    torch.testing.assert_close(lp, ref, rtol=0, atol=1e-5)
    assert logits.shape == (8, 6, model.config.vocab_size)


def test_distinct_prompts_and_single_token_responses(tiny, monkeypatch):
    assert prefix_sharing.distinct_prompts([[1, 2], [3], [1, 2], [3], [4]]) == ([[1, 2], [3], [4]], [0, 1, 0, 1, 2])
    model, tok = _model(tiny, "qwen2", False)
    responses = [[7]] * len(PROMPTS)  # R = 1: the prompts' last hidden states are all that is needed
    seen = _decoder_tokens(model, monkeypatch)
    with torch.no_grad():
        lp, _ = lpmod.response_logprobs(model, PROMPTS, responses, tok.pad_token_id)
        ref = _one_pass(model, PROMPTS, responses, tok.pad_token_id)
    assert seen[0] == 3 * 9 and len(seen) == 2  # the prefix pass, then the reference's own forward
    torch.testing.assert_close(lp, ref, rtol=0, atol=1e-5)


def test_one_pass_when_no_prompt_repeats_or_layers_checkpoint(tiny, monkeypatch):
    model, tok = _model(tiny, "qwen2", False)
    decoder, _ = lpmod._decoder_and_head(model)
    assert prefix_sharing.shares_prefixes(decoder, PROMPTS)
    assert not prefix_sharing.shares_prefixes(decoder, P)  # all distinct
    assert not prefix_sharing.shares_prefixes(decoder, [[], [], [1]])  # an empty prompt has no last position
    from transformers import Qwen2Config, Qwen2ForCausalLM

    windowed = Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                            num_attention_heads=2, num_key_value_heads=1, use_sliding_window=True,
                                            sliding_window=4, max_window_layers=1))
    assert not prefix_sharing.shares_prefixes(windowed.model, PROMPTS)  # its cache keeps only the window
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()  # transformers drops the cache in checkpointed layers: sharing would lose the prompt
    assert not prefix_sharing.shares_prefixes(decoder, PROMPTS)
    seen = _decoder_tokens(model, monkeypatch)
    lp, _ = lpmod.response_logprobs(model, PROMPTS, RESPONSES, tok.pad_token_id)
    assert seen == [8 * (9 + 6)]
    model.eval()
    torch.testing.assert_close(lp, _one_pass(model, PROMPTS, RESPONSES, tok.pad_token_id), rtol=0, atol=1e-5)
