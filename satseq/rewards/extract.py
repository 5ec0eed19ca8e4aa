"""Final-answer extraction and string normalization for math responses.

Nothing here evaluates model output: every function is a pure string transformation built from
regular expressions and a linear brace scanner, so a hostile response can at worst yield a
hostile *string*, which :mod:`satseq.rewards.grade` only ever hands to math-verify's LaTeX parser.

Extraction order in :func:`extract_answer` (``mode="auto"``):

1. the last ``\\boxed{...}`` / ``\\fbox{...}`` (nested braces allowed; ``\\boxed 5`` accepted);
2. the last "final answer is X" / "the answer is X" / "answer: X" phrase;
3. the GSM8K marker ``#### X``;
4. optionally (``last_number=True``) the last number in the text.
"""
from __future__ import annotations

import re
from typing import Literal

__all__ = [
    "extract_boxed",
    "extract_answer",
    "normalize_answer",
    "parse_gsm8k_answer",
    "last_number",
]

ExtractMode = Literal["auto", "boxed", "phrase", "gsm8k", "last_number"]

# ``\boxed`` or ``\fbox`` not followed by another letter (``\boxedx`` is a different macro).
_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")


def _match_braces(text: str, open_pos: int) -> int | None:
    """Index of the ``}`` closing the ``{`` at ``open_pos``, or None if unbalanced.

    A backslash escapes the next character, so ``\\{`` and ``\\}`` (literal braces) and ``\\\\``
    (a LaTeX line break) do not count as grouping braces.
    """
    depth = 0
    i = open_pos
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


def _box_at(text: str, m: re.Match) -> tuple[str | None, int]:
    """Content of the box whose macro is matched by ``m`` and the index just past it.

    Returns ``(None, len(text))`` for an unbalanced ``\\boxed{`` (e.g. a truncated response).
    Without braces (``\\boxed 5``) the argument is the next run of characters up to whitespace
    or ``$``, with trailing ``.,;`` dropped.
    """
    j = m.end()
    n = len(text)
    while j < n and text[j] in " \t":
        j += 1
    if j < n and text[j] == "{":
        close = _match_braces(text, j)
        if close is None:
            return None, n
        return text[j + 1 : close], close + 1
    k = j
    while k < n and not text[k].isspace() and text[k] != "$":
        k += 1
    return text[j:k].rstrip(".,;"), k


def extract_boxed(text: str | None) -> str | None:
    """The content of the LAST outermost ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``.

    - nested braces are kept: ``\\boxed{\\frac{1}{2}}`` -> ``\\frac{1}{2}``;
    - a box whose whole content is another box is unwrapped: ``\\boxed{\\boxed{5}}`` -> ``5``;
    - ``\\boxed 5`` (no braces) -> ``5``;
    - an unbalanced last box (``\\boxed{5``), an empty box, or no box -> ``None``.
    """
    if not text:
        return None
    last: str | None = None
    found = False
    pos = 0
    while True:
        m = _BOX_RE.search(text, pos)
        if m is None:
            break
        found = True
        content, end = _box_at(text, m)
        last = content
        pos = max(end, m.end())
        if content is None:  # unbalanced: swallows the rest of the text
            break
    if not found or last is None:
        return None
    content = last.strip()
    # Unwrap \boxed{\boxed{x}} (a box that is exactly another box).
    while True:
        m = _BOX_RE.match(content)
        if m is None:
            break
        inner, end = _box_at(content, m)
        if inner is None or content[end:].strip():
            break
        content = inner.strip()
    return content or None


_PHRASE_RE = re.compile(
    r"(?:final\s+answer|the\s+answer)\s*(?:is|:)\s*:?\s*(?P<ans>[^\n]+)"
    r"|(?:^|(?<=[\s*(]))answer\s*:\s*(?P<ans2>[^\n]+)",
    re.IGNORECASE | re.MULTILINE,
)
# A number: optional sign, thousands groups or plain digits, optional decimals; or a fraction a/b.
_NUMBER_RE = re.compile(
    r"(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+)?|(?<![\w.])-?\.\d+"
)


def _clean_span(s: str) -> str | None:
    """Trim a free-text answer span: a leading ``$..$`` span, the first sentence, ``**``, punctuation."""
    s = s.strip()
    # "$\frac{1}{2}$. Some more words" -> the first math span if the span starts with one.
    if s.startswith("$"):
        m = re.match(r"\$+([^$]+)\$+", s)
        if m:
            s = m.group(1)
    s = re.split(r"\.\s", s, maxsplit=1)[0]  # "5. I hope it is correct." -> "5"
    s = s.strip().strip("*").strip()
    s = s.rstrip(".,;:!").strip()
    return s or None


def last_number(text: str | None) -> str | None:
    """The last number in ``text`` (``1,000`` -> ``1000``; ``3/4`` kept as a fraction), or None."""
    if not text:
        return None
    matches = _NUMBER_RE.findall(text)
    if not matches:
        return None
    return re.sub(r"\s+", "", matches[-1]).replace(",", "")


def parse_gsm8k_answer(solution: str | None) -> str | None:
    """The final answer of a GSM8K solution: the text after the last ``####``, commas removed.

    ``"... so 18 eggs.\\n#### 1,018"`` -> ``"1018"``; None when there is no ``####`` marker.
    """
    if not solution or "####" not in solution:
        return None
    ans = solution.rsplit("####", 1)[1].strip().splitlines()
    if not ans:
        return None
    s = ans[0].strip().rstrip(".").strip()
    if re.fullmatch(r"-?\$?\d{1,3}(?:,\d{3})+(?:\.\d+)?", s):
        s = s.replace(",", "")
    s = s.replace("$", "") if re.fullmatch(r"-?\$[\d.,]+", s) else s
    return s or None


def extract_answer(
    text: str | None, mode: ExtractMode = "auto", *, last_number_fallback: bool = False
) -> str | None:
    """The final answer in a model response, or None.

    ``mode``: ``"auto"`` (boxed, then answer phrase, then ``####``), ``"boxed"``, ``"phrase"``,
    ``"gsm8k"`` (``####`` then boxed) or ``"last_number"``. With ``last_number_fallback`` the last
    number in the text is used when the mode's own strategies find nothing.
    """
    if not text:
        return None
    if mode not in ("auto", "boxed", "phrase", "gsm8k", "last_number"):
        raise ValueError(f"extract_answer: unknown mode {mode!r}")
    ans: str | None = None
    if mode == "auto":
        ans = extract_boxed(text)
        if ans is None:
            ans = _extract_phrase(text)
        if ans is None:
            ans = parse_gsm8k_answer(text)
    elif mode == "boxed":
        ans = extract_boxed(text)
    elif mode == "phrase":
        ans = _extract_phrase(text)
    elif mode == "gsm8k":
        ans = parse_gsm8k_answer(text)
        if ans is None:
            ans = extract_boxed(text)
    elif mode == "last_number":
        return last_number(text)
    if ans is None and last_number_fallback:
        ans = last_number(text)
    return ans


def _extract_phrase(text: str) -> str | None:
    """X in the last "final answer is X" / "the answer is X" / "answer: X" (up to end of line)."""
    last = None
    pos = 0
    while True:  # overlapping search: "Final Answer: The final answer is 5" -> the inner phrase
        m = _PHRASE_RE.search(text, pos)
        if m is None:
            break
        last, pos = m, m.start() + 1
    if last is None:
        return None
    span = last.group("ans") if last.group("ans") is not None else last.group("ans2")
    return _clean_span(span)


# ----------------------------------------------------------------------------------------------
# Normalization
# ----------------------------------------------------------------------------------------------

_TEXT_MACROS = r"\\(?:text|textbf|textit|textrm|textnormal|mathrm|mathbf|mathit|mbox|operatorname)"
_TEXT_RE = re.compile(_TEXT_MACROS + r"\s*\{([^{}]*)\}")
_UNIT_WORDS = (
    "degrees", "degree", "units", "unit", "square units", "sq units", "cm", "mm", "km", "meters",
    "meter", "metres", "inches", "inch", "feet", "foot", "ft", "miles", "mile", "mph", "dollars",
    "dollar", "cents", "cent", "hours", "hour", "minutes", "minute", "seconds", "second", "days",
    "day", "years", "year", "pounds", "kg", "grams", "liters", "litres", "people", "students",
)
_UNIT_RE = re.compile(
    r"(?<=[\d}])\s*(?:\\\s|~)?\s*(?:" + "|".join(re.escape(u) for u in sorted(_UNIT_WORDS, key=len, reverse=True)) + r")(?:\^\{?[23]\}?)?\s*$"
)
_LHS_RE = re.compile(r"^[A-Za-z](?:_\{?\w+\}?)?\s*(?:=|\\in(?![A-Za-z]))\s*(?=\S)")
_THOUSANDS_RE = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")


def _fix_fracs(s: str) -> str:
    """``\\frac12`` -> ``\\frac{1}{2}``, ``\\frac{270}7`` -> ``\\frac{270}{7}``, ``\\frac 59`` likewise."""
    s = re.sub(r"\\frac\s*(\d)\s*(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\frac\s*(\{[^{}]*\})\s*(\d)", r"\\frac\1{\2}", s)
    s = re.sub(r"\\frac\s*(\d)\s*(\{)", r"\\frac{\1}\2", s)
    s = re.sub(r"\\sqrt\s*(\d)", r"\\sqrt{\1}", s)
    return s


def normalize_answer(s: str | None) -> str:
    """A canonical string form of an answer, used for the fast string comparison.

    Steps (in order): drop ``$``, ``\\(`` ``\\)``, ``\\[`` ``\\]``; unwrap a whole ``\\boxed{}``;
    ``\\text{..}``/``\\mathrm{..}``/... -> content; drop ``\\left``/``\\right``, spacing macros
    (``\\, \\! \\; \\:``) and ``{,}`` -> ``,``; ``\\dfrac``/``\\tfrac`` -> ``\\frac``; degrees
    (``^\\circ``, ``^{\\circ}``, ``°``, ``\\degree``), ``\\%``/``%`` and ``\\$`` dropped; a trailing
    unit word (``5 cm``, ``12 dollars``) dropped; a leading ``x =`` / ``x \\in`` dropped;
    ``\\frac12`` -> ``\\frac{1}{2}``; whitespace removed except after a LaTeX command
    (``\\cot x`` keeps its space); ``1,000`` -> ``1000`` only when the whole answer is a number;
    a trailing ``.`` dropped. Returns ``""`` for None.
    """
    if s is None:
        return ""
    s = str(s).strip()
    s = s.replace("\\(", "").replace("\\)", "").replace("\\[", "").replace("\\]", "")
    s = s.replace("\\$", "").replace("$", "").strip()
    boxed = extract_boxed(s) if _BOX_RE.match(s) else None
    if boxed is not None:
        s = boxed
    for _ in range(5):  # nested \text{\textbf{..}}
        new = _TEXT_RE.sub(r"\1", s)
        if new == s:
            break
        s = new
    s = re.sub(r"\\(?:left|right|big|Big|bigg|Bigg)(?![A-Za-z])\s*", "", s)
    s = re.sub(r"\\[,!;:](?![A-Za-z])", "", s)
    s = s.replace("{,}", ",")
    s = re.sub(r"\\[dt]frac(?![A-Za-z])", r"\\frac", s)
    s = re.sub(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ(?![A-Za-z])|\\circ(?![A-Za-z])|°|\\degree(?![A-Za-z])", "", s)
    s = s.replace("\\%", "").replace("%", "")
    s = s.replace("~", " ").strip()
    for _ in range(2):
        new = _UNIT_RE.sub("", s).strip()
        if not new:
            break
        s = new
    if s.count("=") <= 1:  # "x = 5" -> "5", but "a=1,b=2" is kept whole
        s = _LHS_RE.sub("", s)
    s = _fix_fracs(s)
    # Remove whitespace, except a single space after a command word (\cot x, \pi r).
    s = re.sub(r"(\\[A-Za-z]+)?\s+", lambda m: m.group(1) + " " if m.group(1) else "", s).strip()
    if _THOUSANDS_RE.fullmatch(s):
        s = s.replace(",", "")
    if len(s) > 1 and s.endswith(".") and not s.endswith(".."):
        s = s[:-1]
    return s
