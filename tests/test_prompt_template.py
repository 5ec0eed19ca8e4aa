"""data.prompt_template: boxed (default), chat, raw, or a custom {problem} template."""
import json

import pytest

from satseq.errors import ConfigError
from satseq.workflows.prompts import BOXED_INSTRUCTION, make_format

JINJA = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}<|assistant|>"


@pytest.fixture()
def tok():
    from satseq.models.tiny import build_char_tokenizer

    t = build_char_tokenizer()
    t.chat_template = JINJA
    return t


def fmt(tok, template, chat_template="auto"):
    return make_format("chat", tok, chat_template=chat_template, template=template)


def test_boxed_is_todays_default(tok):
    assert fmt(tok, "boxed").single("2+2?") == f"<|user|>2+2?\n\n{BOXED_INSTRUCTION}<|end|><|assistant|>"
    assert fmt(tok, "boxed", "never").single("2+2?") == f"2+2?\n\n{BOXED_INSTRUCTION}\n"


def test_raw_is_the_problem_text_exactly(tok):
    f = fmt(tok, "raw")
    assert f.single("Q: 2+2=") == "Q: 2+2="
    assert f.relay("Q: 2+2=", [("4", "x")]) == "Q: 2+2=\n\nEarlier agents answered (they may be wrong):\nAgent 1: 4"


def test_show_previous_none_gives_later_agents_the_problem_alone(tok):
    f = make_format("chat", tok, chat_template="never", template="Q: {problem}{previous}\nA:", show_previous="none")
    assert f.relay("What is 2 + 2?", [("4", "2 + 2 = 4.")]) == f.single("What is 2 + 2?") == "Q: What is 2 + 2?\nA:"


def test_chat_wraps_the_problem_alone_even_when_chat_template_never(tok):
    assert fmt(tok, "chat").single("2+2?") == "<|user|>2+2?<|end|><|assistant|>"
    assert fmt(tok, "chat", "never").single("2+2?") == "<|user|>2+2?<|end|><|assistant|>"


def test_custom_template_keeps_other_braces(tok):
    f = fmt(tok, "Question: {problem}\nAnswer in \\boxed{}.", "never")
    assert f.single("2+2?") == "Question: 2+2?\nAnswer in \\boxed{}."  # exactly the template's text


def test_previous_placeholder_puts_earlier_answers_inline(tok):
    f = fmt(tok, "Q: {problem}{previous}\nA:", "never")
    assert f.single("What is 2 + 2?") == "Q: What is 2 + 2?\nA:"
    assert f.relay("What is 2 + 2?", [("4", "2 + 2 = 4."), (None, "no idea")]) == (
        "Q: What is 2 + 2? Earlier agents answered: 4; (no answer) (they may be wrong).\nA:")
    g = make_format("chat", tok, chat_template="never", template="Q: {problem}{previous}\nA:",
                    show_previous="responses", previous_budget=5)
    assert g.relay("1+1?", [("2", "so it is 2.")]) == "Q: 1+1? Earlier agents answered: is 2. (they may be wrong).\nA:"


def test_chat_without_a_chat_template_is_a_config_error():
    from satseq.models.tiny import build_char_tokenizer

    with pytest.raises(ConfigError, match="prompt_template=chat"):
        make_format("chat", build_char_tokenizer(), template="chat")


def test_config_validates_the_key():
    from satseq.config import load_config

    assert load_config(None, ["data.prompt_template=raw"]).data.prompt_template == "raw"
    assert load_config(None, ["data.prompt_template=Q: {problem} A:"]).data.prompt_template == "Q: {problem} A:"
    with pytest.raises(ConfigError, match="data.prompt_template.*raw"):
        load_config(None, ["data.prompt_template=rawish"])


def test_methods_pass_the_template_to_their_formats(tok):
    from satseq.config import load_config
    from satseq.registry import get_method

    for method in ("sat_seq", "grpo", "pag", "mlmt"):
        cfg = load_config(None, [f"method={method}", "data.prompt_template=raw"])
        assert get_method(method).environment(cfg).prompt_format("chat", tok, cfg).single("7*6=") == "7*6="


def test_previous_template_renders_only_the_turns_shown_earlier_answers(tok):
    """sat_seq.previous_template: the first agent keeps data.prompt_template, later agents get theirs."""
    from satseq.config import load_config
    from satseq.registry import get_method

    first, later = "Q: {problem}\nA:", "Shown: Q: 1+1? Earlier agents answered: 2.\nA: 2\n\nQ: {problem}{previous}\nA:"
    cfg = load_config(None, ["method=sat_seq", "model.chat_template=never", f"data.prompt_template={json.dumps(first)}",
                             f"sat_seq.previous_template={json.dumps(later)}"])
    f = get_method("sat_seq").environment(cfg).prompt_format("chat", tok, cfg)
    assert f.relay("What is 2 + 2?", []) == f.single("What is 2 + 2?") == "Q: What is 2 + 2?\nA:"
    assert f.relay("What is 2 + 2?", [("4", "x")]) == (
        "Shown: Q: 1+1? Earlier agents answered: 2.\nA: 2\n\nQ: What is 2 + 2? Earlier agents answered: 4 "
        "(they may be wrong).\nA:")
    for method in ("simultaneous", "shared_policy"):  # the same relay format
        assert get_method(method).environment(cfg).prompt_format("chat", tok, cfg).relay("2+2?", [("4", "x")]) == f.relay("2+2?", [("4", "x")])


LATER = 'sat_seq.previous_template="Q: {problem}{previous}\\nA:"'


def test_previous_template_errors_name_the_key(tok):
    from satseq.config import load_config
    from satseq.registry import get_method

    with pytest.raises(ConfigError, match="sat_seq.previous_template.*previous"):
        load_config(None, ['sat_seq.previous_template="Q: {problem}\\nA:"'])
    with pytest.raises(ConfigError, match="sat_seq.previous_template.*show_previous=none"):
        load_config(None, ["method=sat_seq", "sat_seq.show_previous=none", LATER])
    cfg = load_config(None, ["method=sat_seq", LATER])
    with pytest.raises(ConfigError, match="sat_seq.previous_template.*chat models only"):
        get_method("sat_seq").environment(cfg).prompt_format("embedded", tok, cfg)
