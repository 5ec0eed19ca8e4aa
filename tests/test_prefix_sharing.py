"""The trainer's forward with shared prompt prefixes run once (satseq/rollout/prefix_sharing.py): the same
log-probs and gradients as the one-pass forward over every row, on Qwen2 and Llama, full and LoRA,
for repeated prompts and for prompts that share only a prefix (a relay's later turns), with fewer
token-positions through the decoder; the one-pass layout whenever sharing would be wrong or pay little."""
import copy

import pytest
import torch
from numerics import fp_tol
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


@pytest.mark.numerics
@pytest.mark.parametrize("arch,lora", [("qwen2", False), ("qwen2", True), ("llama", False), ("llama", True)])
def test_shared_prefix_logprobs_and_gradients_equal_the_one_pass_forward(tiny, monkeypatch, arch, lora):
    model, tok = _model(tiny, arch, lora)
    seen = _decoder_tokens(model, monkeypatch)
    lp, mask = lpmod.response_logprobs(model, PROMPTS, RESPONSES, tok.pad_token_id)
    # 3 distinct prompts, each but its last token (width 8) once; then 8 rows × (1 last prompt token +
    # R − 1 = 5 response tokens)
    assert seen == [3 * 8, 8 * 6]
    ref = _one_pass(model, PROMPTS, RESPONSES, tok.pad_token_id)
    torch.testing.assert_close(lp, ref, rtol=0, atol=fp_tol(ref))
    assert mask.sum(1).tolist() == [len(r) for r in RESPONSES]
    params = [p for p in model.parameters() if p.requires_grad]
    weights = torch.arange(1, 7, dtype=torch.float32)
    g1 = torch.autograd.grad((lp * weights).sum(), params, allow_unused=True)
    g2 = torch.autograd.grad((ref * mask * weights).sum(), params, allow_unused=True)
    compared = 0
    for a, b in zip(g1, g2):
        if a is not None or b is not None:
            torch.testing.assert_close(a, b, rtol=0, atol=fp_tol(b))
            compared += 1
    assert compared >= (8 if lora else 20)  # the prompt's k/v projections get their gradient through the cache


@pytest.mark.numerics
def test_full_logits_path_shares_prefixes_too(tiny, monkeypatch):
    model, tok = _model(tiny, "llama", False)
    seen = _decoder_tokens(model, monkeypatch)
    with torch.no_grad():
        lp, mask, logits = lpmod.response_logprobs(model, PROMPTS, RESPONSES, tok.pad_token_id, return_logits=True)
        ref = _one_pass(model, PROMPTS, RESPONSES, tok.pad_token_id)
    assert seen[:2] == [3 * 8, 8 * 6]
    torch.testing.assert_close(lp, ref, rtol=0, atol=fp_tol(ref))
    assert logits.shape == (8, 6, model.config.vocab_size)


def test_prefix_groups_share_the_most_positions():
    groups = prefix_sharing.prefix_groups
    prefixes, rows = groups([[1, 2, 3], [5, 6], [1, 2, 3], [5, 6]])
    assert sorted(prefixes) == [[1, 2], [5]] and rows[0] == rows[2] != rows[1] == rows[3]
    # a relay's later turns: the template and the problem, then different earlier answers
    base = [9, 8, 7, 6, 5, 4]
    prompts = [base + [20, 2], base + [21, 2], [3, 3, 3], base + [22, 23, 2]]
    prefixes, rows = groups(prompts)
    assert prefixes[rows[0]] == base and rows[0] == rows[1] == rows[3] != rows[2]
    assert prefixes[rows[2]] == [3, 3]  # alone: everything but its last token
    assert all(prompts[i][:len(prefixes[g])] == prefixes[g] and len(prefixes[g]) < len(prompts[i])
               for i, g in enumerate(rows))
    # a prefix never swallows a whole prompt, even one that is a prefix of another
    prefixes, rows = groups([[1, 2], [1, 2, 3, 4], [1, 2, 3, 5]])
    assert all(len(prefixes[g]) < len(p) for p, g in zip([[1, 2], [1, 2, 3, 4], [1, 2, 3, 5]], rows))


@pytest.mark.numerics
@pytest.mark.parametrize("arch,lora", [("qwen2", False), ("llama", True)])
def test_prompts_that_share_only_a_prefix(tiny, monkeypatch, arch, lora):
    model, tok = _model(tiny, arch, lora)
    base = [5, 9, 13, 4, 22, 7, 8, 30, 31, 2, 6, 11]  # a template + problem; then each row's earlier answer
    prompts = [base + [14, 15, 3], base + [16, 3], base + [17, 18, 19, 3], base + [14, 15, 3]]
    responses = [[20, 21, 22], [23], [24, 25], [26, 27, 28, 29]]
    seen = _decoder_tokens(model, monkeypatch)
    lp, mask = lpmod.response_logprobs(model, prompts, responses, tok.pad_token_id)
    assert seen == [1 * 12, 4 * (3 + 3)]  # the shared 12 once; then the widest rest + response − 1 (row 3: 3 + 3)
    ref = _one_pass(model, prompts, responses, tok.pad_token_id)
    torch.testing.assert_close(lp, ref, rtol=0, atol=fp_tol(ref))
    params = [p for p in model.parameters() if p.requires_grad]
    g1 = torch.autograd.grad((lp * torch.arange(1, 5)).sum(), params, allow_unused=True)
    g2 = torch.autograd.grad((ref * mask * torch.arange(1, 5)).sum(), params, allow_unused=True)
    for a, b in zip(g1, g2):
        if a is not None or b is not None:
            torch.testing.assert_close(a, b, rtol=0, atol=fp_tol(b))


@pytest.mark.numerics
def test_single_token_responses(tiny, monkeypatch):
    model, tok = _model(tiny, "qwen2", False)
    responses = [[7]] * len(PROMPTS)  # R = 1: the prompts' last hidden states are all that is needed
    seen = _decoder_tokens(model, monkeypatch)
    with torch.no_grad():
        lp, _ = lpmod.response_logprobs(model, PROMPTS, responses, tok.pad_token_id)
        ref = _one_pass(model, PROMPTS, responses, tok.pad_token_id)
    assert seen[0] == 3 * 8 and len(seen) == 3  # prefixes, the last prompt tokens, the reference's own forward
    torch.testing.assert_close(lp, ref, rtol=0, atol=fp_tol(ref))


@pytest.mark.numerics
def test_one_pass_when_no_prompt_repeats_or_layers_checkpoint(tiny, monkeypatch):
    model, tok = _model(tiny, "qwen2", False)
    decoder, _ = lpmod._decoder_and_head(model)
    assert prefix_sharing.sharing_plan(decoder, PROMPTS, RESPONSES)
    assert not prefix_sharing.sharing_plan(decoder, P, RESPONSES[:3])  # nothing shared
    assert not prefix_sharing.sharing_plan(decoder, [[1], [1], [1]], [[2]] * 3)  # a prompt needs 2 tokens
    assert not prefix_sharing.sharing_plan(decoder, [[1, 2, 3, 4], [1, 2, 3, 5]], [[6] * 30] * 2)  # saves < 10 %
    from transformers import Qwen2Config, Qwen2ForCausalLM

    windowed = Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                            num_attention_heads=2, num_key_value_heads=1, use_sliding_window=True,
                                            sliding_window=4, max_window_layers=1))
    assert not prefix_sharing.sharing_plan(windowed.model, PROMPTS, RESPONSES)  # its cache keeps only the window
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()  # transformers drops the cache in checkpointed layers: sharing would lose the prompt
    assert not prefix_sharing.sharing_plan(decoder, PROMPTS, RESPONSES)
    seen = _decoder_tokens(model, monkeypatch)
    lp, _ = lpmod.response_logprobs(model, PROMPTS, RESPONSES, tok.pad_token_id)
    assert seen == [8 * (9 + 2)]  # one layout, as wide as the longest prompt + response − 1 (row 4)
    model.eval()
    ref = _one_pass(model, PROMPTS, RESPONSES, tok.pad_token_id)
    torch.testing.assert_close(lp, ref, rtol=0, atol=fp_tol(ref))
