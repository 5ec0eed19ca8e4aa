"""Input-size guard: answers no parser should see.

:func:`refusal` runs on a normalized answer before anything parses it. A refused answer is graded
by exact string equality only (after normalization), never by math-verify. Limits:

- **length**: more than :data:`MAX_ANSWER_CHARS` characters (checked on the raw answer too);
- **nesting**: braces nested deeper than :data:`MAX_BRACE_DEPTH`, or ``{ ( [`` together deeper than
  :data:`MAX_GROUP_DEPTH` (math-verify's LaTeX parser is exponential in brace depth: depth 12 takes
  ~1.4 s, 16 ~15 s, 20 over a minute);
- **unbalanced braces** (a truncated answer such as ``\\frac{1}{2``): never a finished answer;
- **explosive**: a power tower (an exponent that holds ``^``, ``!`` or ``\\uparrow``: ``10^{10^{10}}``,
  ``2^3^4``), an exponent literal of 7+ digits (``2^{1234567}``), a factorial of a 5+ digit literal
  (``99999!``), a factorial of a group holding a power or factorial (``(10^9)!``, ``(5!)!``), and
  a factorial together with an exponent literal of 4+ digits (``(9999!)^{99999}``).

The process pool's hard kill (:mod:`satseq.rewards.grading_pool`) remains the backstop for whatever
slips through.
"""
from __future__ import annotations

import re

__all__ = ["MAX_ANSWER_CHARS", "MAX_BRACE_DEPTH", "MAX_GROUP_DEPTH", "refusal", "looks_explosive"]

#: Answers longer than this are graded by exact string equality only (no parser is run).
MAX_ANSWER_CHARS = 1000
#: Deepest ``{}`` nesting handed to a parser (real answers: 3-4, e.g. a matrix of ``\\frac{\\sqrt{2}}{2}``).
MAX_BRACE_DEPTH = 8
#: Deepest nesting of ``{ ( [`` together.
MAX_GROUP_DEPTH = 12


def _depths(s: str) -> tuple[int, int, bool]:
    """(max brace depth, max ``{([`` depth, braces balanced); ``\\{`` ``\\}`` are literal braces."""
    brace = group = max_brace = max_group = 0
    balanced = True
    i, n = 0, len(s)
    while i < n:
        ch = s[i]
        if ch == "\\":
            nxt = s[i + 1] if i + 1 < n else ""
            if nxt in "{}":  # \{ \} are set braces: grouping for depth, not for balance
                group = group + 1 if nxt == "{" else max(group - 1, 0)
                max_group = max(max_group, group)
            i += 2
            continue
        if ch == "{":
            brace += 1
            group += 1
        elif ch == "}":
            brace -= 1
            group = max(group - 1, 0)
            if brace < 0:
                balanced = False
                brace = 0
        elif ch in "([":
            group += 1
        elif ch in ")]":
            group = max(group - 1, 0)
        max_brace, max_group = max(max_brace, brace), max(max_group, group)
        i += 1
    return max_brace, max_group, balanced and brace == 0


def _exponent_args(s: str):
    """Yield the argument of every ``^`` (a braced group, or the next token)."""
    for m in re.finditer(r"\^", s):
        j = m.end()
        while j < len(s) and s[j] == " ":
            j += 1
        if j < len(s) and s[j] == "{":
            depth, k = 0, j
            while k < len(s):
                depth += {"{": 1, "}": -1}.get(s[k], 0)
                if depth == 0:
                    break
                k += 1
            yield s[j + 1 : k]
        else:
            tok = re.match(r"\\?[A-Za-z]+|\d+|.", s[j:])
            yield tok.group(0) if tok else ""


def looks_explosive(s: str) -> bool:
    """True for power towers, huge exponents or huge factorials (see module doc)."""
    if "\\uparrow" in s:
        return True
    big_exponent = False
    if "^" in s:
        for arg in _exponent_args(s):
            if "^" in arg or "!" in arg or "\\uparrow" in arg:
                return True
            digits = re.sub(r"\D", "", arg)
            if len(digits) >= 7:
                return True
            big_exponent = big_exponent or len(digits) >= 4
        if re.search(r"\^\s*\d+\s*\^", s):  # 2^3^4 (no braces)
            return True
    if "!" in s:
        if re.search(r"\d{5,}\s*!", s) or big_exponent:
            return True
        if re.search(r"[)}]\s*!", s) and ("^" in s or s.count("!") > 1):
            return True
    return False


def refusal(s: str) -> str | None:
    """Why ``s`` must not be parsed (``"length"``, ``"nesting"``, ``"unbalanced"``, ``"explosive"``), or None."""
    if len(s) > MAX_ANSWER_CHARS:
        return "length"
    if "{" in s or "}" in s or "(" in s or "[" in s:
        brace, group, balanced = _depths(s)
        if not balanced:
            return "unbalanced"
        if brace > MAX_BRACE_DEPTH or group > MAX_GROUP_DEPTH:
            return "nesting"
    if looks_explosive(s):
        return "explosive"
    return None
