"""The converted-model cache (satseq.models.gguf): a GGUF file is parsed once per machine, and what the
cache gives back is the same model and tokenizer, bit for bit and token for token."""
from __future__ import annotations

import time

import pytest
import torch

import satseq.models.loading as loading
from satseq.errors import SatseqError
from satseq.models.gguf import gguf_cache_dir
from satseq.models.loading import load_causal_lm, load_tokenizer, smollm2_gguf_path
from satseq.models.tiny import build_tiny_model


@pytest.fixture
def cache_on(tmp_path, monkeypatch):
    monkeypatch.setenv("SATSEQ_GGUF_CACHE", "1")
    monkeypatch.setenv("SATSEQ_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_the_key_follows_the_file_and_the_switch_turns_it_off(tmp_path, cache_on, monkeypatch):
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    a.write_bytes(b"GGUF one")
    b.write_bytes(b"GGUF two")
    ka, kb = gguf_cache_dir(a), gguf_cache_dir(b)
    assert ka.parent == kb.parent == cache_on / "gguf"
    assert ka != kb and ka.name.startswith("a-") and "transformers" in ka.name
    b.write_bytes(b"GGUF one")
    assert gguf_cache_dir(b).name.split("-", 1)[1] == ka.name.split("-", 1)[1]  # same bytes, same key
    monkeypatch.setenv("SATSEQ_GGUF_CACHE", "0")
    assert gguf_cache_dir(a) is None


def _fake_gguf(tmp_path, monkeypatch):
    """A .gguf file whose 'conversion' is a tiny model; counts the conversions."""
    path = tmp_path / "tiny.gguf"
    path.write_bytes(b"not parsed: the loader is replaced")
    model, tok = build_tiny_model(seed=3)
    calls = []

    def fake_load(directory, name, torch_dtype):
        calls.append(name)
        return model

    class FakeAuto:
        @staticmethod
        def from_pretrained(*a, **k):
            return tok

    monkeypatch.setattr(loading, "_load_gguf_model", fake_load)
    monkeypatch.setattr("transformers.AutoTokenizer", FakeAuto)
    return path, model, calls


def test_the_first_load_converts_and_later_loads_read_the_same_weights(tmp_path, cache_on, monkeypatch):
    path, model, calls = _fake_gguf(tmp_path, monkeypatch)
    m1, t1 = load_causal_lm(path)
    m2, t2 = load_causal_lm(path)
    t3 = load_tokenizer(path)
    assert calls == ["tiny.gguf"]  # converted once, then read from the cache
    (entry,) = (cache_on / "gguf").iterdir()
    assert (entry / "model.safetensors").is_file() and not entry.name.startswith(".")
    for (n, p), (n2, p2) in zip(m1.state_dict().items(), m2.state_dict().items()):
        assert n == n2 and torch.equal(p, p2)
    text = "12+7=19"
    assert t2(text)["input_ids"] == t1(text)["input_ids"] == t3(text)["input_ids"]
    assert (t2.pad_token_id, t2.eos_token_id, t2.padding_side) == (t1.pad_token_id, t1.eos_token_id, "left")


def test_other_precisions_and_a_switched_off_cache_convert_every_time(tmp_path, cache_on, monkeypatch):
    path, _, calls = _fake_gguf(tmp_path, monkeypatch)
    load_causal_lm(path, dtype="bfloat16")
    assert not (cache_on / "gguf").exists()  # only float32 is cached
    monkeypatch.setenv("SATSEQ_GGUF_CACHE", "0")
    load_causal_lm(path)
    load_causal_lm(path)
    assert len(calls) == 3 and not (cache_on / "gguf").exists()


@pytest.mark.slow
def test_smollm2_from_the_cache_is_the_gguf_model(cache_on):
    try:
        smollm2_gguf_path()
    except SatseqError as e:
        pytest.skip(str(e))
    t0 = time.perf_counter()
    ref, ref_tok = load_causal_lm("smollm2")  # parses the GGUF, fills the cache
    t1 = time.perf_counter()
    model, tok = load_causal_lm("smollm2")
    t2 = time.perf_counter()
    tok_only = load_tokenizer("smollm2")
    ref_state = ref.state_dict()
    state = model.state_dict()
    assert state.keys() == ref_state.keys()
    for name, p in state.items():
        assert p.dtype == ref_state[name].dtype and torch.equal(p, ref_state[name]), name
    assert model.config.tie_word_embeddings == ref.config.tie_word_embeddings
    assert model.generation_config.eos_token_id == ref.generation_config.eos_token_id
    assert tok.get_vocab() == ref_tok.get_vocab() == tok_only.get_vocab()
    assert tok.chat_template == ref_tok.chat_template
    assert (tok.pad_token_id, tok.eos_token_id, tok.bos_token_id) == (ref_tok.pad_token_id, ref_tok.eos_token_id,
                                                                      ref_tok.bos_token_id)
    msgs = [{"role": "user", "content": "What is 12 + 25? Answer: 37."}]
    prompt = ref_tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) == prompt
    for text in (prompt, "Q: What is 4 + 3 + 9?\nA: 4 + 3 = 7. The answer is 16.\n", " é\t12 "):
        ids = ref_tok(text, add_special_tokens=False)["input_ids"]
        assert tok(text, add_special_tokens=False)["input_ids"] == ids
        assert tok_only(text, add_special_tokens=False)["input_ids"] == ids
    print(f"\nsmollm2: GGUF load and cache write {t1 - t0:.1f} s, load from the cache {t2 - t1:.1f} s")
