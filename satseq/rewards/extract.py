"""Final-answer extraction and string normalization for math responses.

Nothing here evaluates model output: every function is a pure string transformation built from
regular expressions and a linear brace scanner, so a hostile response can at worst yield a
hostile *string*, which :mod:`satseq.rewards.grade` only ever hands to math-verify's LaTeX parser.

Extraction order in :func:`extract_answer` (``mode="auto"``):

1. the last top-level ``\\boxed{...}`` / ``\\fbox{...}`` (nested braces allowed; ``\\boxed 5``
   accepted); a response whose box never closes (cut off) has no answer at all, with no fallback;
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
    "has_truncated_box",
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


def _last_box(text: str) -> tuple[str | None, bool]:
    """``(content of the last top-level box or None, truncated)``; truncated: a box never closes."""
    last: str | None = None
    pos = 0
    while True:
        m = _BOX_RE.search(text, pos)
        if m is None:
            return last, False
        content, end = _box_at(text, m)
        if content is None:  # unbalanced: the response was cut off inside a box
            return None, True
        last = content
        pos = max(end, m.end())


def has_truncated_box(text: str | None) -> bool:
    """Whether ``text`` opens a ``\\boxed{`` that never closes (a response cut off mid-answer)."""
    return bool(text) and bool(_last_box(text)[1])


def extract_boxed(text: str | None) -> str | None:
    """The content of the LAST top-level ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``.

    - nested braces are kept: ``\\boxed{\\frac{1}{2}}`` -> ``\\frac{1}{2}``;
    - boxes inside the last box never replace it: ``\\boxed{\\frac{7}{\\boxed{3}}}`` ->
      ``\\frac{7}{\\boxed{3}}`` (:func:`normalize_answer` then drops the inner box: 7/3);
    - a box whose whole content is another box is unwrapped: ``\\boxed{\\boxed{5}}`` -> ``5``;
    - ``\\boxed 5`` (no braces) -> ``5``;
    - an unbalanced box anywhere after the last complete one (``\\boxed{5``), an empty box, or no box -> ``None``.
    """
    if not text:
        return None
    last, truncated = _last_box(text)
    if truncated or last is None:
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


def _unbox(s: str) -> str:
    """Every ``\\boxed{X}`` / ``\\fbox{X}`` inside an answer replaced by ``X`` (a nested box is
    part of its parent's expression, never an answer of its own). Unbalanced boxes are left."""
    out, pos = [], 0
    for _ in range(100):
        m = _BOX_RE.search(s, pos)
        if m is None:
            break
        content, end = _box_at(s, m)
        if content is None:
            break
        out.append(s[pos : m.start()])
        out.append(_unbox(content) if _BOX_RE.search(content) else content)
        pos = end
    out.append(s[pos:])
    return "".join(out)


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
    if mode != "last_number" and has_truncated_box(text):
        return None  # cut off inside its answer box: no fallback to a phrase, #### or last number
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
# A trailing \text{ word(s)} after a number or group (``12\text{ apples}``, ``864\mbox{ inches}^2``).
_TEXT_UNIT_RE = re.compile(
    r"(?<=[\w}.)])\s*(?:\\\s|~)?\s*" + _TEXT_MACROS + r"\s*\{\s*[A-Za-z][A-Za-z ./]*\}(?:\^\{?[23]\}?)?\s*\.?\s*$"
)
# Trailing plain words after a number and a space (``12 apples``, ``5 square feet``).
_WORD_UNIT_RE = re.compile(
    r"(?<=\d)\s+(?!(?:pi|sqrt|and|or|to|times|over|plus|minus|mod|infinity|infty|is|for)\b)"
    r"(?:[A-Za-z]+/[A-Za-z]+|[A-Za-z]{2,})(?:\s+[A-Za-z]{2,})*\.?(?:\^\{?[23]\}?)?$"
)
_UNICODE = {"\u2212": "-", "\u2013": "-", "\u03c0": "\\pi ", "\u00d7": "\\times ", "\u22c5": "\\cdot ",
            "\u00b7": "\\cdot ", "\u221e": "\\infty ", "\u00f7": "\\div ", "\u2264": "\\le ", "\u2265": "\\ge ",
            "\u00bd": "\\frac{1}{2}", "\u00bc": "\\frac{1}{4}", "\u00be": "\\frac{3}{4}"}
_LHS_RE = re.compile(r"^[A-Za-z](?:_\{?\w+\}?)?\s*(?:=|\\in(?![A-Za-z]))\s*(?=\S)")
_SAME_LHS_LIST_RE = re.compile(r"\s*([A-Za-z])\s*=\s*[^,=]+(?:,\s*\1\s*=\s*[^,=]+)+\s*")
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

    Steps (in order): unicode math (``−``, ``π``, ``√``, ``×``, ``∞``, ...) and plain-text ``sqrt(..)``
    / ``pi`` to LaTeX; drop ``$``, ``\\(`` ``\\)``, ``\\[`` ``\\]``, ``\\displaystyle``, markdown
    ``**``; every ``\\boxed{X}`` -> ``X`` (a whole-answer box, or one nested in the answer:
    ``\\frac{7}{\\boxed{3}}`` -> ``\\frac{7}{3}``); "percent" -> ``%``; a trailing ``\\text{ words}``
    unit dropped; ``\\text{..}``/``\\mathrm{..}``/... -> content; "or"/"and" between values -> ``,``;
    ``infinity`` -> ``\\infty``; drop ``\\left``/``\\right``, spacing macros (``\\, \\! \\; \\:``,
    ``\\ ``) and ``{,}`` -> ``,``; ``\\dfrac``/``\\tfrac`` -> ``\\frac``; degrees (``^\\circ``,
    ``^{\\circ}``, ``°``, ``\\degree``), ``\\%``/``%`` and ``\\$`` dropped; a trailing unit word
    (``5 cm``, ``12 dollars``, ``60 km/h``, ``14 triangles``) dropped; a leading ``x =`` / ``x \\in``
    dropped, and ``x=1, x=2`` -> ``1,2``; ``\\frac12`` -> ``\\frac{1}{2}``; ``2 1/3`` ->
    ``2\\frac{1}{3}`` (a mixed number); whitespace removed except after a LaTeX command (``\\cot x``
    keeps its space); ``1,000`` -> ``1000`` only when the whole answer is a number; a trailing ``.``
    dropped. Returns ``""`` for None. The percent sign's meaning is read by the grader from the raw
    answer (:mod:`satseq.rewards.numbers`).
    """
    if s is None:
        return ""
    s = str(s).strip()
    for k, v in _UNICODE.items():
        if k in s:
            s = s.replace(k, v)
    s = re.sub(r"\u221a\s*(\d+)", r"\\sqrt{\1}", s).replace("\u221a", "\\sqrt")
    s = s.replace("\\(", "").replace("\\)", "").replace("\\[", "").replace("\\]", "")
    s = s.replace("\\$", "").replace("$", "").strip()
    s = re.sub(r"(?<![A-Za-z\\])sqrt\s*\(([^()]*)\)", r"\\sqrt{\1}", s)  # plain-text sqrt(2), pi
    s = re.sub(r"(?<![A-Za-z\\])(sqrt(?=\s*\{)|pi(?![A-Za-z]))", r"\\\1", s)
    s = re.sub(r"\\(?:displaystyle|textstyle)(?![A-Za-z])", "", s).strip().strip("*").strip()
    if _BOX_RE.search(s):
        s = _unbox(s)  # a box nested in the answer is part of it: \frac{7}{\boxed{3}} -> \frac{7}{3}
    s = re.sub(r"\\percent(?![A-Za-z])|\s*\\?\s*(?:\\text\s*\{\s*percent\s*\}|percent)$", "%", s)
    for _ in range(2):
        new = _TEXT_UNIT_RE.sub("", s).strip()
        if not new or new == s:
            break
        s = new
    for _ in range(5):  # nested \text{\textbf{..}}
        new = _TEXT_RE.sub(r"\1", s)
        if new == s:
            break
        s = new
    s = re.sub(r"(?<=\S)\s*,?\s+(?:or|and)\s+(?=\S)", ",", s)  # "1 \text{ or } 2" lists like "1, 2"
    s = re.sub(r"(?<![A-Za-z\\])infinity(?![A-Za-z])", r"\\infty", s)
    s = re.sub(r"\\(?:left|right|big|Big|bigg|Bigg)(?![A-Za-z])\s*", "", s)
    s = re.sub(r"\\[,!;:](?![A-Za-z])", "", s)
    s = re.sub(r"(?<!\\)\\ ", " ", s)  # "5\ \text{cm}" (but not the "\\" of a line break)
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
    new = _WORD_UNIT_RE.sub("", s).strip()
    s = new or s
    if s.count("=") <= 1:  # "x = 5" -> "5", but "a=1,b=2" is kept whole
        s = _LHS_RE.sub("", s)
    else:  # "x = 1, x = 2" (one variable, several values) -> "1,2"
        m = _SAME_LHS_LIST_RE.fullmatch(s)
        if m:
            s = re.sub(r"(^|,)\s*" + m.group(1) + r"\s*=\s*", r"\1", s)
    s = _fix_fracs(s)
    s = re.sub(r"(?<![\d.,])(\d+)\s+(\d+)\s*/\s*(\d+)(?![\d.])", r"\1\\frac{\2}{\3}", s)  # "2 1/3": mixed
    # Remove whitespace, except a single space after a command word (\cot x, \pi r).
    s = re.sub(r"(\\[A-Za-z]+)?\s+", lambda m: m.group(1) + " " if m.group(1) else "", s).strip()
    if _THOUSANDS_RE.fullmatch(s):
        s = s.replace(",", "")
    if len(s) > 1 and s.endswith(".") and not s.endswith(".."):
        s = s[:-1]
    return s
