"""The trainer's forward: only the positions that predict response tokens reach the LM head
(``logits_to_keep``), and without full logits asked for, the head runs over a few positions at a
time (under autograd, recomputed in backward when the batch's log-softmax is large). Log-probs and gradients are those of the plain full forward."""
import pytest
import torch
from numerics import fp_tol

from satseq.rollout import logprobs as lpmod
from satseq.rollout.padding import prompt_response_batch

PROMPTS = [[5, 9, 13, 4, 22], [7, 8, 30, 31, 2, 6, 11, 12, 19], [3, 3, 17, 25, 26, 9, 8]]
RESPONSES = [[14, 15, 16, 21], [33], [6, 7, 8, 9, 10, 23]]


def _reference(model, pad_id, T):
    ids, am, pos, start, r_mask = prompt_response_batch(PROMPTS, RESPONSES, pad_id)
    full = model(input_ids=ids, attention_mask=am, position_ids=pos, use_cache=False).logits
    ref = torch.log_softmax(full[:, start - 1:start - 1 + r_mask.shape[1]].float() / T, -1)
    out = torch.zeros(r_mask.shape)
    rows = []
    for i, r in enumerate(RESPONSES):
        rows.append(torch.nn.functional.pad(ref[i, torch.arange(len(r)), torch.tensor(r)], (0, r_mask.shape[1] - len(r))))
    return torch.stack(rows) + out


@pytest.mark.numerics
@pytest.mark.parametrize("chunk_bytes", [lpmod.CHUNK_BYTES, 1])  # 1 byte: one position per chunk
@pytest.mark.parametrize("contiguous", [True, False])  # chunks copied contiguous (default) or strided views
def test_chunked_logprobs_and_grads_equal_the_full_forward(tiny, monkeypatch, chunk_bytes, contiguous):
    model, tok = tiny
    monkeypatch.setattr(lpmod, "CHUNK_BYTES", chunk_bytes)
    monkeypatch.setattr(lpmod, "CONTIGUOUS_CHUNKS", contiguous)
    assert lpmod._decoder_and_head(model) is not None  # the tiny Qwen2 takes the chunked path
    lp, mask = lpmod.response_logprobs(model, PROMPTS, RESPONSES, tok.pad_token_id, temperature=0.7)
    ref = _reference(model, tok.pad_token_id, 0.7)
    torch.testing.assert_close(lp, ref, rtol=0, atol=fp_tol(ref))
    assert mask.sum(1).tolist() == [len(r) for r in RESPONSES]
    params = [p for p in model.parameters() if p.requires_grad]
    g1 = torch.autograd.grad((lp * torch.arange(1, 7)).sum(), params, allow_unused=True)
    g2 = torch.autograd.grad((ref * torch.arange(1, 7)).sum(), params, allow_unused=True)
    for a, b in zip(g1, g2):
        if a is not None or b is not None:
            torch.testing.assert_close(a, b, rtol=0, atol=fp_tol(b))


@pytest.mark.parametrize("mode", ["full", "lora"])
def test_kept_and_recomputed_chunks_give_the_same_bits(tiny, monkeypatch, mode):
    """Below KEEP_LOGITS_BYTES the chunks' log-softmax is kept for backward (one head pass per chunk);
    above it each chunk is recomputed in backward (two). Same chunks, so the same log-probs and
    gradients bit for bit."""
    import copy

    from satseq.models.agents import AgentPool

    monkeypatch.setattr(lpmod, "CHUNK_BYTES", 1)  # one position per chunk: 6 chunks

    def run(keep_bytes):
        monkeypatch.setattr(lpmod, "KEEP_LOGITS_BYTES", keep_bytes)
        model, tok = copy.deepcopy(tiny[0]), tiny[1]
        torch.manual_seed(0)
        pool = AgentPool.full(["a"], [model], tok) if mode == "full" else \
            AgentPool.lora(["a"], model, tok, r=4, dropout=0.0)
        m = pool.module("a")
        head = m.get_output_embeddings()
        calls = []
        forward = head.forward
        head.forward = lambda x: calls.append(x.shape[:-1]) or forward(x)
        lp, _ = lpmod.response_logprobs(m, PROMPTS, RESPONSES, tok.pad_token_id, temperature=0.7)
        (lp * torch.arange(1, 7)).sum().backward()
        grads = {n: p.grad.clone() for n, p in pool.named_trainable("a").items() if p.grad is not None}
        return lp.detach(), grads, len(calls)

    kept, recomputed = run(2**40), run(0)
    assert kept[2] == 6 and recomputed[2] == 12  # the head ran once per chunk, or again in backward
    assert torch.equal(kept[0], recomputed[0])
    assert kept[1].keys() == recomputed[1].keys() and kept[1]
    for n in kept[1]:
        assert torch.equal(kept[1][n], recomputed[1][n]), n


@pytest.mark.numerics
def test_logits_path_projects_only_response_predicting_positions(tiny, monkeypatch):
    model, tok = tiny
    head_rows = []
    head = model.get_output_embeddings()
    monkeypatch.setattr(head, "forward", lambda x, real=head.forward: head_rows.append(x.shape[:-1]) or real(x))
    with torch.no_grad():
        lp, mask, logits = lpmod.response_logprobs(model, PROMPTS, RESPONSES, tok.pad_token_id, temperature=0.7,
                                                   return_logits=True)
    monkeypatch.undo()
    ref = _reference(model, tok.pad_token_id, 0.7)
    assert head_rows == [(3, 6)]  # B × R positions reach the LM head, not the 9 + 6 of the widest row
    torch.testing.assert_close(lp, ref, rtol=0, atol=fp_tol(ref))
    assert logits.shape == (3, 6, model.config.vocab_size)


@pytest.mark.numerics
def test_logits_path_of_other_architectures_keeps_only_r_plus_one_positions(tiny, monkeypatch):
    """A head that is not a plain projection (soft-capping, logit scale): the model's own forward with
    ``logits_to_keep = R + 1``."""
    model, tok = tiny
    monkeypatch.setattr(lpmod, "_decoder_and_head", lambda m: None)
    seen = []
    real = lpmod.last_logits_only
    monkeypatch.setattr(lpmod, "last_logits_only", lambda m, n=1: seen.append(n) or real(m, n))
    with torch.no_grad():
        lp, mask, logits = lpmod.response_logprobs(model, PROMPTS, RESPONSES, tok.pad_token_id, temperature=0.7,
                                                   return_logits=True)
        ref = _reference(model, tok.pad_token_id, 0.7)
    assert seen == [7]  # R + 1 positions reach the LM head, not the 9 + 6 of the widest row
    torch.testing.assert_close(lp, ref, rtol=0, atol=fp_tol(ref))
    assert logits.shape == (3, 6, model.config.vocab_size)


@pytest.mark.numerics
@pytest.mark.parametrize("mode", ["full", "lora"])
def test_gradient_checkpointing_gives_the_same_gradients(tiny, mode):
    import copy

    from satseq.models.agents import AgentPool

    def grads(checkpointing: bool):
        model, tok = copy.deepcopy(tiny[0]), tiny[1]
        torch.manual_seed(0)  # LoRA's A init
        pool = AgentPool.full(["a"], [model], tok) if mode == "full" else \
            AgentPool.lora(["a"], model, tok, r=4, dropout=0.0)
        if mode == "lora":  # B = 0 at init gives A no gradient: move off the init
            with torch.no_grad():
                for n, p in pool.named_trainable("a").items():
                    p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(len(n))))
        if checkpointing:
            pool.enable_gradient_checkpointing()
        m = pool.module("a")
        m.train()
        calls = []
        mlp = (m.get_base_model() if mode == "lora" else m).model.layers[0].mlp  # inside the checkpoint
        forward = mlp.forward
        mlp.forward = lambda *a, **k: calls.append(1) or forward(*a, **k)  # (hooks do not fire on recompute)
        lp, _ = lpmod.response_logprobs(m, PROMPTS, RESPONSES, tok.pad_token_id)
        lp.sum().backward()
        assert len(calls) == (2 if checkpointing else 1)  # recomputed in backward
        return {n: p.grad.clone() for n, p in pool.named_trainable("a").items()}

    plain, ckpt = grads(False), grads(True)
    assert plain.keys() == ckpt.keys() and plain
    for n in plain:
        torch.testing.assert_close(ckpt[n], plain[n], rtol=0, atol=fp_tol(plain[n]))


def test_release_memory_fixes_glibcs_mmap_threshold_unless_the_user_chose_one():
    import os
    import subprocess
    import sys

    code = "from satseq.utils.memory import release_freed_memory as r; print(r())"
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}
    applied = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env).stdout.strip()
    assert applied == ("True" if os.uname().sysname == "Linux" else applied)
    env["MALLOC_MMAP_THRESHOLD_"] = "65536"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env).stdout.strip() == "False"
