"""Plain text from an extracted answer, for scorers that compare text rather than mathematics
(reasoning-gym's). Kept apart from :mod:`satseq.rewards.extract`, whose code is part of the shipped chain
warm start's fingerprint (:data:`satseq.models.shipped.BUILD_MODULES`)."""
from __future__ import annotations

import re

from satseq.rewards.extract import _TEXT_MACROS, _match_braces

_WHOLE_MACRO_RE = re.compile(_TEXT_MACROS + r"\s*\{")


def plain_text_answer(answer: str) -> str:
    """An extracted answer with the LaTeX *around the whole of it* removed, for scorers that compare
    text, not mathematics (reasoning-gym's): surrounding ``$...$`` / ``\\(...\\)`` and a ``\\text{...}``
    (``\\textbf``, ``\\mathrm``, ... as in :func:`normalize_answer`) whose braces close at the end, repeatedly,
    then the outer whitespace. Nothing inside is changed: ``\\boxed{\\text{nus}}`` -> ``nus``,
    ``\\boxed{['-1', '2']}`` -> ``['-1', '2']``, ``a \\text{b}`` stays as it is."""
    s = answer.strip()
    while True:
        d = "$$" if s.startswith("$$") else "$"
        if len(s) > 2 * len(d) and s.startswith(d) and s.endswith(d) and "$" not in s[len(d):-len(d)]:
            s = s[len(d):-len(d)].strip()  # "$5$ and $6$" is not one formula: kept
            continue
        if s.startswith("\\(") and s.endswith("\\)"):
            s = s[2:-2].strip()
            continue
        m = _WHOLE_MACRO_RE.match(s)
        if m and _match_braces(s, m.end() - 1) == len(s) - 1:
            s = s[m.end():-1].strip()
            continue
        return s
