"""How a problem (and what earlier turns said) becomes the text an agent sees.

Two formats: ``embedded`` for the built-in arithmetic task (fixed-length prompts, see
:mod:`satseq.data.arithmetic`) and ``chat`` for real instruction models (the tokenizer's chat
template and, by default, the usual "put your final answer within \\boxed{}" instruction;
``data.prompt_template`` chooses ``boxed``, ``chat``, ``raw`` or a custom ``{problem}`` template).
"""
from __future__ import annotations

from satseq.data import arithmetic

BOXED_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


def render_problem(template: str, problem: str, previous: str = "") -> str:
    """The user text of a turn under ``data.prompt_template`` (before any chat template).

    A custom template may hold ``{previous}``: there the earlier agents' answers go inline (empty
    for the first agent), so that a few-shot prompt ending in ``A:`` stays well formed in a relay.
    """
    if template == "boxed":
        return f"{problem}\n\n{BOXED_INSTRUCTION}"
    if template in ("chat", "raw"):
        return problem
    # not str.format: templates may contain \boxed{}
    return template.replace("{problem}", problem).replace("{previous}", previous)


class EmbeddedFormat:
    name = "embedded"

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def relay(self, problem: str, previous: list[tuple[str | None, str]]) -> str:
        return arithmetic.render_prompt(problem, [a for a, _ in previous])

    def single(self, problem: str) -> str:
        return arithmetic.render_prompt(problem)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]


class ChatFormat:
    name = "chat"

    def __init__(self, tokenizer, *, use_chat_template: bool = True, show_responses: bool = False,
                 response_budget: int = 200, template: str = "boxed", hide_previous: bool = False,
                 previous_template: str | None = None):
        self.tokenizer = tokenizer
        self.hide_previous = hide_previous
        self.previous_template = previous_template
        has_template = getattr(tokenizer, "chat_template", None) is not None
        if template == "chat" and not has_template:
            from satseq.errors import ConfigError

            raise ConfigError("data.prompt_template=chat: this tokenizer has no chat template "
                              "(use raw, boxed or a custom template with {problem})")
        self.template = template
        self.use_chat_template = has_template and (template == "chat" or (use_chat_template and template != "raw"))
        self.show_responses = show_responses
        self.response_budget = response_budget

    @staticmethod
    def _tail(text: str | None, budget: int) -> str:
        """``text`` stripped, or ``"..."`` + its last ``budget`` characters when longer."""
        text = (text or "").strip()
        return text if len(text) <= budget else "..." + text[-budget:]

    @staticmethod
    def _fill(template: str, **values: str) -> str:
        """``template`` with each ``{name}`` replaced (plain replacement: braces in a problem stay as
        they are). The exact-text turn prompts of PAG and MLMT (``pag.verify_prompt``, ``mlmt.coach_prompt``, ...)."""
        for name, value in values.items():
            template = template.replace("{" + name + "}", value)
        return template

    def _wrap(self, user: str) -> str:
        if self.template == "raw":
            return user
        if not self.use_chat_template:  # a custom template is the exact text; boxed ends in a newline
            return user + "\n" if self.template == "boxed" else user
        return self.tokenizer.apply_chat_template([{"role": "user", "content": user}], tokenize=False,
                                                  add_generation_prompt=True)

    def single(self, problem: str) -> str:
        return self._wrap(render_problem(self.template, problem))

    def relay(self, problem: str, previous: list[tuple[str | None, str]]) -> str:
        if not previous or self.hide_previous:
            return self.single(problem)
        shown = [resp[-self.response_budget:] if self.show_responses else (ans if ans is not None else "(no answer)")
                 for ans, resp in previous]
        later = self.previous_template or self.template
        if "{previous}" in later:
            inline = f" Earlier agents answered: {'; '.join(shown)} (they may be wrong)."
            return self._wrap(render_problem(later, problem, inline))
        lines = [f"Agent {k}: {x}" for k, x in enumerate(shown, start=1)]
        earlier = "\n\nEarlier agents answered (they may be wrong):\n" + "\n".join(lines)
        if self.template == "boxed":
            return self._wrap(f"{problem}{earlier}\n\n{BOXED_INSTRUCTION}")
        return self._wrap(render_problem(self.template, problem) + earlier)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]


def make_format(kind: str, tokenizer, *, chat_template: str = "auto", show_previous: str = "answers",
                previous_budget: int = 200, template: str = "boxed", previous_template: str | None = None):
    """The prompt format of a model kind. ``previous_template`` (``sat_seq.previous_template``, chat models
    only) renders the relay turns shown earlier answers; the first turn, and every turn of other workflows, use ``template``."""
    if kind == "embedded":
        return EmbeddedFormat(tokenizer)
    return ChatFormat(tokenizer, use_chat_template=chat_template != "never",
                      show_responses=show_previous == "responses", response_budget=previous_budget,
                      template=template, hide_previous=show_previous == "none", previous_template=previous_template)


def check_turn_prompts(kind: str, name: str, section, keys: tuple[str, ...], own: str) -> None:
    """Refuse an exact-text turn prompt (``pag.verify_prompt``, ``mlmt.coach_prompt``, ...) for the
    embedded model, which has its own turn format (``own``: what it is and where it lives)."""
    from satseq.errors import ConfigError

    for key in keys:
        if kind == "embedded" and getattr(section, key) is not None:
            raise ConfigError(f"config key '{name}.{key}': for chat models only; the embedded model has its own {own}")

