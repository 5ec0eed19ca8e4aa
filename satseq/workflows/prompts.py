"""How a problem (and what earlier turns said) becomes the text an agent sees.

Two formats: ``embedded`` for the built-in arithmetic task (fixed-length prompts, see
:mod:`satseq.data.arithmetic`) and ``chat`` for real instruction models (the tokenizer's chat
template, the usual "put your final answer within \\boxed{}" instruction).
"""
from __future__ import annotations

from satseq.data import arithmetic

BOXED_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


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
                 response_budget: int = 200):
        self.tokenizer = tokenizer
        self.use_chat_template = use_chat_template and getattr(tokenizer, "chat_template", None) is not None
        self.show_responses = show_responses
        self.response_budget = response_budget

    @staticmethod
    def _tail(text: str | None, budget: int) -> str:
        """``text`` stripped, or ``"..."`` + its last ``budget`` characters when longer."""
        text = (text or "").strip()
        return text if len(text) <= budget else "..." + text[-budget:]

    def _wrap(self, user: str) -> str:
        if not self.use_chat_template:
            return user + "\n"
        return self.tokenizer.apply_chat_template([{"role": "user", "content": user}], tokenize=False,
                                                  add_generation_prompt=True)

    def single(self, problem: str) -> str:
        return self._wrap(f"{problem}\n\n{BOXED_INSTRUCTION}")

    def relay(self, problem: str, previous: list[tuple[str | None, str]]) -> str:
        if not previous:
            return self.single(problem)
        lines = []
        for k, (ans, resp) in enumerate(previous, start=1):
            shown = resp[-self.response_budget:] if self.show_responses else (ans if ans is not None else "(no answer)")
            lines.append(f"Agent {k}: {shown}")
        return self._wrap(f"{problem}\n\nEarlier agents answered (they may be wrong):\n" + "\n".join(lines)
                          + f"\n\n{BOXED_INSTRUCTION}")

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]


def make_format(kind: str, tokenizer, *, chat_template: str = "auto", show_previous: str = "answers",
                previous_budget: int = 200):
    if kind == "embedded":
        return EmbeddedFormat(tokenizer)
    return ChatFormat(tokenizer, use_chat_template=chat_template != "never",
                      show_responses=show_previous == "responses", response_budget=previous_budget)
