"""The embedded default model: a tiny Qwen2-architecture causal LM with a character tokenizer.

Everything here is built in code (no download): a character-level ``tokenizers`` tokenizer over
printable ASCII, saved as a normal ``tokenizer.json``, and a ~2M-parameter Qwen2 config
(hidden 192, 4 layers, 6 heads / 2 KV heads, FFN 768, tied embeddings). The saved directory is an
ordinary Hugging Face model directory: anything that loads HF models loads it.
"""
from __future__ import annotations

import string
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
CHARS = [c for c in string.printable if c not in "\t\r\x0b\x0c"]  # 95 printable chars + "\n"


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    """Character-level tokenizer: one token per printable ASCII character, plus pad/eos/unk."""
    vocab = {tok: i for i, tok in enumerate([PAD, EOS, UNK] + CHARS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token=PAD, eos_token=EOS, unk_token=UNK, padding_side="left"
    )
    return fast


def tiny_config(vocab_size: int, *, pad_id: int, eos_id: int, hidden: int = 192, layers: int = 4,
                heads: int = 6, kv_heads: int = 2, ffn: int = 768, max_positions: int = 256) -> Qwen2Config:
    return Qwen2Config(
        vocab_size=vocab_size, hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=max_positions,
        tie_word_embeddings=True, pad_token_id=pad_id, eos_token_id=eos_id, bos_token_id=eos_id,
        rope_theta=10000.0, use_sliding_window=False,
    )


def build_tiny_model(seed: int = 0, **config_overrides) -> tuple[Qwen2ForCausalLM, PreTrainedTokenizerFast]:
    """A freshly initialised tiny model and its tokenizer (deterministic given ``seed``)."""
    tokenizer = build_char_tokenizer()
    cfg = tiny_config(len(tokenizer), pad_id=tokenizer.pad_token_id, eos_id=tokenizer.eos_token_id,
                      **config_overrides)
    cfg.satseq_prompt_format = "embedded"  # kept in config.json: checkpoints remember their task format
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model, tokenizer


def save_model_dir(model, tokenizer, out_dir: str | Path) -> Path:
    """Save as a normal HF model directory (safetensors + tokenizer.json)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    return out_dir
