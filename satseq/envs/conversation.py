"""Conversations, token for token: a turn's prompt is a list of messages, and an agent that continues
its own conversation continues it with exactly the ids it sampled.

**Messages and formats.** A :class:`Message` has a role (``system``, ``user``, ``assistant`` or
``tool``), a content and, for tool messages, an optional ``name`` and ``tool_call_id`` (a scripted
assistant message may carry ``tool_calls``; a sampled one keeps its calls in its text). A format
renders a list of messages as text and encodes text as ids:

* :class:`ChatTemplateFormat` — the tokenizer's chat template,
  ``apply_chat_template(messages, tools=..., add_generation_prompt=..., tokenize=False)``, then the
  text encoded without special tokens (the template writes them), as
  :class:`satseq.workflows.prompts.ChatFormat` encodes a prompt. A one-message conversation
  ``[user(text)]`` is exactly ``ChatFormat``'s chat-template prompt of ``text``.
* :class:`PlainFormat` — *the embedded model's format* (any tokenizer without a chat template).
  The first message is its content as is; an assistant message is its content followed by the EOS
  token (``<eos>``: the embedded model ends its responses with it); every other later message is
  ``"<role>: <content>\\n"`` (``"tool <name>: ..."`` for a named tool message); nothing is added for
  the generation prompt (the model continues right after the last message, as the first turn's
  ``____|____|347+589=`` ends at ``=``). So ``[user(render_prompt(problem))]`` is today's embedded
  prompt, id for id, and the format preserves prefixes by construction.

**Continuing.** A :class:`Conversation` holds the messages and ``ids``, the exact token ids so far.
:meth:`Conversation.prompt_ids` gives the next turn's prompt: on the first turn the rendered
conversation encoded; after a sampled turn, the previous prompt's ids + the response's ids *as
sampled* + the encoded *delta*. The delta is the text the conversation with its new messages renders
(``add_generation_prompt=True``) after the text the ids already stand for; that text is checked to be
a prefix of the new rendering (else the conversation falls back to whole renderings, below), and the
last response's ids are checked to decode to the text rendered for it (a mismatch is counted in
``Conversation.mismatches`` and said once in the log; the ids are kept: they are what the model saw). The sampled ids are never decoded and
re-encoded: the assistant message's content (the response decoded without special tokens) is used
only to render the *next* messages, and ``spans`` gives, per assistant turn, the ``[start, end)`` of
its sampled ids inside ``ids``. So the trainer's forward on ``ids`` scores exactly the sampled ids in
exactly the sampled context.

**The end of an assistant turn.** After the content of an assistant message a template writes its
end-of-turn text (SmolLM2: ``<|im_end|>\\n``; the plain format: ``<eos>``). When the response ended
with the tokenizer's EOS token (``finish_reason == "eos"``; SmolLM2's is ``<|im_end|>``) and the
template's end-of-turn text after the content begins with that token, the sampled EOS *is* the template's, and only the rest (SmolLM2: ``\\n``) is added; otherwise
(stopped by a stop string, by ``max_new_tokens``, or an EOS the template does not write there) the
template's whole end-of-turn text is added after the sampled ids, so the next message's ids follow
the template. A sampled EOS that the template does not write stays in the ids (the ids decode then to
more than the rendering: a mismatch). The added end-of-turn ids are encoded together with the next
messages (one ``encode`` of the delta, as the template's own encoding would tokenize them), and they
belong to the next prompt, not to the sampled span.

**Prefix preservation.** Continuing by a delta is right only if rendering more messages never
changes the rendering of the earlier ones. :func:`check_prefix_preserving` tests the template once,
when a format is built (TRL's ``is_chat_template_prefix_preserving``, ``trl/chat_template_utils.py``,
renders a 1-, 2- and 3-message conversation and checks each text is a prefix of the next; here on
user → assistant → tool → assistant → user, with a ``<think>`` block in the first answer to catch a
template that drops earlier reasoning, as Qwen3's does, and on the ids as well as on the text). Where
it fails, one warning line says so, and every turn's prompt is the *whole* conversation rendered and
encoded again: the assistant's earlier turns are then re-rendered from their text, so their ids may
differ from those sampled; each turn's own prompt and response ids (what the engine returned) stay
exact, but ``ids`` no longer continues the earlier turns, and ``spans`` holds only the turns sampled
since the last re-rendering. A single conversation whose rendering stops being a prefix (a template
that rewrites some content, e.g. trims it) switches to whole renderings the same way, with one
warning per process.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence, Union

_logger = logging.getLogger(__name__)

ROLES = ("system", "user", "assistant", "tool")


@dataclass(frozen=True)
class Message:
    """One message of a conversation (the chat templates' dict: :meth:`as_dict`)."""

    role: str
    content: str
    name: Optional[str] = None          # tool messages: the tool's name
    tool_call_id: Optional[str] = None  # tool messages: the call answered
    #: a scripted assistant message's calls in the templates' shape (``[{"type": "function", "function":
    #: {"name", "arguments"}}]``); a *sampled* turn has none: its calls are in its text, as sampled
    tool_calls: Optional[list] = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"message role '{self.role}': not one of {', '.join(ROLES)}")
        if not isinstance(self.content, str):
            raise ValueError(f"message content must be text, got {type(self.content).__name__}")

    def as_dict(self) -> dict:
        out = {"role": self.role, "content": self.content}
        if self.name is not None:
            out["name"] = self.name
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.tool_calls is not None:
            out["tool_calls"] = self.tool_calls
        return out


MessageLike = Union[Message, dict]


def as_message(m: MessageLike) -> Message:
    """A :class:`Message` from a message or a ``{"role", "content", ...}`` dict."""
    if isinstance(m, Message):
        return m
    unknown = set(m) - {"role", "content", "name", "tool_call_id", "tool_calls"}
    if unknown:
        raise ValueError(f"message key '{sorted(unknown)[0]}': unknown (known: role, content, name, tool_call_id, "
                         f"tool_calls)")
    return Message(**m)


class _Format:
    """What both formats share: encoding, decoding, the EOS token, the prefix check at construction."""

    name = ""

    def __init__(self, tokenizer, *, check: bool = True):
        self.tokenizer = tokenizer
        self.eos_id = tokenizer.eos_token_id
        self.eos_token = tokenizer.eos_token if tokenizer.eos_token_id is not None else None
        self.prefix_preserving = check_prefix_preserving(self) if check else True

    def render(self, messages: Sequence[Message], *, add_generation_prompt: bool) -> str:
        raise NotImplementedError

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def decode(self, ids: Sequence[int]) -> str:
        """The text ``ids`` stand for, special tokens included, spaces as they are."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def content(self, response_ids: Sequence[int]) -> str:
        """An assistant message's content from its sampled ids: decoded without special tokens."""
        return self.tokenizer.decode(list(response_ids), skip_special_tokens=True, clean_up_tokenization_spaces=False)


class ChatTemplateFormat(_Format):
    """The tokenizer's chat template (``tools``: the tool schemas the template is given, or None)."""

    name = "chat"

    def __init__(self, tokenizer, *, tools: Optional[list] = None, check: bool = True):
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError("ChatTemplateFormat: this tokenizer has no chat template (use PlainFormat)")
        self.tools = tools
        super().__init__(tokenizer, check=check)

    def render(self, messages: Sequence[Message], *, add_generation_prompt: bool) -> str:
        kw = {} if self.tools is None else {"tools": self.tools}
        return self.tokenizer.apply_chat_template([m.as_dict() for m in messages], tokenize=False,
                                                  add_generation_prompt=add_generation_prompt, **kw)


class PlainFormat(_Format):
    """The embedded model's format (module docstring): the first message as is, an assistant message
    followed by EOS, any other later message as ``"<role>: <content>\\n"``; no generation prompt."""

    name = "plain"

    def render(self, messages: Sequence[Message], *, add_generation_prompt: bool) -> str:
        end = self.eos_token if self.eos_token is not None else "\n"
        parts = []
        for i, m in enumerate(messages):
            if m.role == "assistant":
                parts.append(m.content + end)
            elif i == 0:
                parts.append(m.content)
            else:
                label = m.role if m.name is None else f"{m.role} {m.name}"
                parts.append(f"{label}: {m.content}\n")
        return "".join(parts)


def conversation_format(tokenizer, *, tools: Optional[list] = None, kind: str = "auto"):
    """The format of a model: ``kind`` ``chat`` (its chat template), ``plain`` / ``embedded`` (the
    embedded model's format) or ``auto`` (the chat template where the tokenizer has one). The template
    is checked for prefix preservation here, once."""
    if kind == "auto":
        kind = "chat" if getattr(tokenizer, "chat_template", None) is not None else "plain"
    if kind == "chat":
        return ChatTemplateFormat(tokenizer, tools=tools)
    if kind in ("plain", "embedded"):
        return PlainFormat(tokenizer)
    raise ValueError(f"conversation format '{kind}': unknown (known: auto, chat, plain, embedded)")


#: the synthetic conversation :func:`check_prefix_preserving` renders, message by message (the first
#: answer holds a reasoning block: a template that drops earlier reasoning fails)
PROBE = (Message("user", "What is 2 + 3?"),
         Message("assistant", "<think>\nAdd the units.\n</think>\n\n2 + 3 = 5."),
         Message("tool", "5", name="calculator"),
         Message("assistant", "It is 5."),
         Message("user", "And 2 + 4?"))


def _probe_renders(fmt, probe: Sequence[Message]) -> list[str]:
    """The probe's prefixes rendered: after a user or tool message with the generation prompt, after
    an assistant message without (what the conversation's ids stand for at each step)."""
    return [fmt.render(probe[:k], add_generation_prompt=probe[k - 1].role != "assistant")
            for k in range(1, len(probe) + 1)]


def check_prefix_preserving(fmt_or_tokenizer, *, tools: Optional[list] = None, warn: bool = True) -> bool:
    """Whether rendering one more message keeps the rendering before it, as text and as ids: each
    rendering of :data:`PROBE` (1 to 5 messages) starts with the one before, and its ids start with
    the ids before. A template that cannot render a tool message is checked with a user message in
    its place. ``fmt_or_tokenizer``: a format, or a tokenizer (its :func:`conversation_format`).
    False: one warning line (``warn``) and the conversation renders whole each turn."""
    fmt = fmt_or_tokenizer
    if not isinstance(fmt, _Format):
        fmt = _unchecked_format(fmt, tools)
    probe = PROBE
    try:
        texts = _probe_renders(fmt, probe)
    except Exception:  # noqa: BLE001 - e.g. a template that allows only alternating user / assistant
        probe = tuple(Message("user", m.content) if m.role == "tool" else m for m in PROBE)
        texts = _probe_renders(fmt, probe)
    ids = [fmt.encode(t) for t in texts]
    for k in range(1, len(texts)):
        what = None
        if not texts[k].startswith(texts[k - 1]):
            what = "text"
        elif ids[k][:len(ids[k - 1])] != ids[k - 1]:
            what = "ids"
        if what is not None:
            if warn:
                _logger.warning("the chat template does not preserve prefixes (adding a %s message changes the %s "
                                "of the %d before): each turn's prompt is the whole conversation rendered again, and "
                                "earlier assistant turns are re-encoded from their text", probe[k].role, what, k)
            return False
    return True


def _unchecked_format(tokenizer, tools):
    if getattr(tokenizer, "chat_template", None) is not None:
        return ChatTemplateFormat(tokenizer, tools=tools, check=False)
    return PlainFormat(tokenizer, check=False)


class Conversation:
    """One agent's conversation: its messages and the exact ids so far (module docstring).

    ``ids``: the prompt ids of the turn being sampled, then (after :meth:`record`) those + the
    response's ids as sampled. ``spans[j]``: the ``[start, end)`` of the j-th assistant turn's sampled
    ids in ``ids`` (in whole mode only the turns since the last re-rendering). ``whole``: every prompt is
    the whole conversation rendered again (the template does not preserve prefixes). ``mismatches``:
    the assistant turns (their index) whose ids did not decode to the text the template renders.

    A turn::

        prompt = conv.prompt_ids()
        gen = engine.generate(module, [prompt], sampling, streams)[0]
        conv.record(gen)
        conv.add(Message("user", "..."))   # then the next prompt_ids()
    """

    def __init__(self, fmt, messages: Iterable[MessageLike] = ()):
        self.fmt = fmt
        self.messages: list[Message] = []     # rendered into ids (the last prompt's, the sampled turns)
        self.ids: list[int] = []
        self.spans: list[tuple[int, int]] = []
        self.whole = not getattr(fmt, "prefix_preserving", True)
        self.mismatches: list[int] = []
        self._pending: list[Message] = [as_message(m) for m in messages]  # not yet in ids
        self._covered = ""         # the rendered text ``ids`` stand for
        self._prompted = False     # ids is the prompt of the turn being sampled
        self._prompt_text = ""
        self._start = 0            # where the last prompt's ids end (the last response's start)
        self._before: tuple = ()   # the state before the last prompt_ids() (add() takes an unsampled prompt back)

    def add(self, *messages: MessageLike) -> "Conversation":
        """New messages for the next prompt (user, tool, system; an assistant message given as text is
        rendered from its text: it has no sampled ids)."""
        if self._prompted:  # a prompt given but not sampled: take it back, the new messages join it
            (self.ids, self.spans, self._covered, self.messages, given, self.whole, self.mismatches, self._start,
             self._prompt_text) = self._before
            self._pending = given + self._pending
        self._pending.extend(as_message(m) for m in messages)
        self._prompted = False
        return self

    @property
    def prompt_text(self) -> str:
        """The rendered text of the last prompt :meth:`prompt_ids` gave."""
        return self._prompt_text

    def prompt_ids(self) -> list[int]:
        """The next turn's prompt ids (a copy; asking again before :meth:`record` or :meth:`add` gives
        the same ids)."""
        if self._prompted:
            return list(self.ids)
        fmt = self.fmt
        messages = self.messages + self._pending
        if not messages:
            raise ValueError("a conversation needs a message before its first prompt")
        target = fmt.render(messages, add_generation_prompt=True)
        self._before = (self.ids, list(self.spans), self._covered, self.messages, self._pending, self.whole,
                        list(self.mismatches), self._start, self._prompt_text)
        if self.ids and not self.whole:
            if not target.startswith(self._covered):
                _warn_once("prefix", "a conversation's rendering stopped being a prefix of the next one (the "
                                     "template rewrites earlier messages): it renders whole from now on")
                self.whole = True
            elif fmt.decode(self.ids[self._start:]) != self._covered[len(self._prompt_text):]:  # the last turn's
                self.mismatches.append(len(self.spans) - 1)
                _warn_once("decode", "a sampled response does not decode to the text the template renders for it "
                                     "(a special token inside it, or an EOS the template does not write there): "
                                     "its ids are kept as sampled")
        if self.ids and not self.whole:
            self.ids = self.ids + fmt.encode(target[len(self._covered):])
        else:
            self.spans = []
            self.ids = fmt.encode(target)
        self.messages, self._pending = messages, []
        self._covered = self._prompt_text = target
        self._start = len(self.ids)
        self._prompted = True
        return list(self.ids)

    def record(self, gen) -> Message:
        """The assistant's sampled turn (a :class:`~satseq.rollout.types.Generation` sampled from
        :meth:`prompt_ids`): its ids appended as sampled, its text (decoded without special tokens)
        appended as the assistant message. Returns that message."""
        if not self._prompted or list(gen.prompt_ids) != self.ids:
            raise ValueError("Conversation.record: the generation was not sampled from this conversation's "
                             "prompt_ids()")
        fmt = self.fmt
        response = list(gen.response_ids)
        message = Message("assistant", fmt.content(response))
        start = len(self.ids)
        self.ids = self.ids + response
        self.spans.append((start, len(self.ids)))
        self.messages.append(message)
        covered = self._covered + message.content
        if response and fmt.eos_id is not None and response[-1] == fmt.eos_id:
            rendered = fmt.render(self.messages, add_generation_prompt=False)
            if rendered.startswith(covered) and rendered[len(covered):].startswith(fmt.eos_token):
                covered += fmt.eos_token  # the sampled EOS is the template's end of turn
        self._covered = covered
        self._prompted = False
        return message

    def copy(self) -> "Conversation":
        """An independent copy sharing the format (e.g. one conversation per episode of a group)."""
        out = Conversation(self.fmt)
        out.__dict__.update({k: (list(v) if isinstance(v, list) else v) for k, v in self.__dict__.items()})
        return out


_WARNED: set = set()


def _warn_once(key: str, text: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        _logger.warning(text)
