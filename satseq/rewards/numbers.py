"""Plain numbers in answers, compared exactly (no floating point, no sympy).

A *plain number* is a normalized answer (:func:`satseq.rewards.extract.normalize_answer`) of one
of these forms: an integer ``-12``; a decimal ``3.50`` / ``.5``; a fraction ``3/4``,
``\\frac{3}{4}``, ``-\\frac{3}{4}``, ``\\frac{-3}{4}``; a mixed number ``1\\frac{4}{5}`` (= 9/5,
only for a proper fraction, so ``2\\frac{7}{3}`` is left to math-verify, which reads a product);
scientific notation ``1.2\\times10^{3}``, ``1.2\\cdot10^{-3}``, ``1.2e3``; a repeating decimal
``0.\\overline{3}`` or ``0.333...`` (= 1/3, exact; an ellipsis counts only after a repeated block,
so ``3.14159...`` is not a plain number); a number word up to a hundred (``twelve``, ``Twenty-five``).

Rules (:func:`numbers_match`):

- **exact**: two values are equal as rationals (``0.5 == 1/2 == \\frac{2}{4}``, ``3.0 == 3``);
- **rounded reference**: when the reference is a decimal written with ``d`` places and the answer is
  an exact value that has *no* terminating decimal form (``1/3``, ``\\sqrt{2}``, ``\\pi``), the answer
  is accepted when it rounds (half away from zero) to the reference at ``d`` places
  (``\\frac13`` for ``0.33``; ``\\sqrt{5}`` for ``2.24``). Nothing else gets a tolerance: a decimal
  answer must equal the reference exactly (``0.3333333`` for ``\\frac13`` is wrong, ``0.33`` for
  ``\\frac13`` is wrong, ``2.236`` for ``2.24`` is wrong, ``0.25`` for ``0.3`` is wrong).

Percent (:func:`percent_candidates`): a side written with ``%`` may also be read as its value / 100,
but only when the other side has no ``%``: ``50`` and ``0.5`` and ``\\frac12`` all match ``50\\%``;
``0.5\\%`` does not (both sides carry ``%``, so the numbers themselves must match).
"""
from __future__ import annotations

import re
from fractions import Fraction
from typing import NamedTuple

__all__ = ["Num", "parse_number", "numbers_match", "rounds_to", "terminates", "percent_candidates"]


class Num(NamedTuple):
    value: Fraction
    places: int | None  # decimal places as written (a rounded reference); None for exact forms


_INT_RE = re.compile(r"[-+]?\d+")
_DEC_RE = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+)")
_ELLIPSIS_RE = re.compile(r"([-+]?)(\d*)\.(\d{2,50})(?:\.\.\.|\\ldots|\\dots|\\cdots|\u2026)")
_REPEAT_RE = re.compile(r"([-+]?)(\d*)\.(\d*)\\overline\{(\d{1,50})\}")
_SLASH_RE = re.compile(r"([-+]?\d+)/([-+]?\d+)")
_FRAC_RE = re.compile(r"([-+]?)\\frac\{([-+]?\d+)\}\{([-+]?\d+)\}")
_MIXED_RE = re.compile(r"([-+]?)(\d+)\\frac\{(\d+)\}\{(\d+)\}")
_SCI_POW_RE = re.compile(r"([-+]?(?:\d+\.?\d*|\.\d+))(?:\\times|\\cdot|\*)10\^\{?([-+]?\d{1,3})\}?")
_SCI_E_RE = re.compile(r"([-+]?(?:\d+\.?\d*|\.\d+))[eE]([-+]?\d{1,3})")
_MAX_DIGITS = 400  # longer literals are not plain numbers (math-verify or string equality decides)


def _decimal(s: str) -> Num:
    places = len(s.split(".", 1)[1]) if "." in s else 0
    return Num(Fraction(s), places if "." in s else None)


_UNITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
          "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TENS = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_WORDS = {w: i for i, w in enumerate(_UNITS)}
_WORDS.update({w: 20 + 10 * i for i, w in enumerate(_TENS)})
_WORDS.update({f"{t}{u}": 20 + 10 * i + j for i, t in enumerate(_TENS) for j, u in enumerate(_UNITS[1:10], 1)})
_WORDS.update({"hundred": 100, "onehundred": 100, "ahundred": 100, "thousand": 1000, "onethousand": 1000})


def parse_number(s: str) -> Num | None:
    """The :class:`Num` for a plain-number answer (see module doc), else None."""
    if not s or len(s) > _MAX_DIGITS:
        return None
    if s[0].isalpha():  # a number word: "twelve", "Twenty-five" (normalized: spaces already gone)
        v = _WORDS.get(s.lower().replace("-", ""))
        return Num(Fraction(v), None) if v is not None else None
    if _INT_RE.fullmatch(s):
        return Num(Fraction(int(s)), None)
    if _DEC_RE.fullmatch(s):
        return _decimal(s)
    m = _ELLIPSIS_RE.fullmatch(s)
    if m:  # 0.333... = 1/3, 0.1666... = 1/6, 0.142857142857... = 1/7: a repeating tail, else no number
        frac = m.group(3)
        for p in range(1, 7):
            if len(frac) >= 2 * p and frac[-p:] == frac[-2 * p : -p]:
                s = f"{m.group(1)}{m.group(2)}.{frac[: len(frac) - 2 * p]}\\overline{{{frac[-p:]}}}"
                break
        else:
            return None
    m = _REPEAT_RE.fullmatch(s)
    if m:  # 0.\overline{3} = 1/3, 1.2\overline{45}
        sign, whole, fixed, rep = m.group(1), m.group(2) or "0", m.group(3), m.group(4)
        v = Fraction(int(whole + fixed), 10 ** len(fixed)) + Fraction(int(rep), (10 ** len(rep) - 1) * 10 ** len(fixed))
        return Num(-v if sign == "-" else v, None)
    m = _SLASH_RE.fullmatch(s)
    if m:
        return Num(Fraction(int(m.group(1)), int(m.group(2))), None) if int(m.group(2)) else None
    m = _FRAC_RE.fullmatch(s)
    if m:
        if not int(m.group(3)):
            return None
        v = Fraction(int(m.group(2)), int(m.group(3)))
        return Num(-v if m.group(1) == "-" else v, None)
    m = _MIXED_RE.fullmatch(s)
    if m:
        whole, num, den = int(m.group(2)), int(m.group(3)), int(m.group(4))
        if not 0 < num < den:
            return None
        v = whole + Fraction(num, den)
        return Num(-v if m.group(1) == "-" else v, None)
    s = s.replace(" ", "")
    m = _SCI_POW_RE.fullmatch(s) or _SCI_E_RE.fullmatch(s)
    if m:
        mant, exp = _decimal(m.group(1)), int(m.group(2))
        places = None if mant.places is None else mant.places - exp
        return Num(mant.value * Fraction(10) ** exp, places)
    return None


def terminates(v: Fraction) -> bool:
    """Whether ``v`` has a finite decimal expansion (its denominator is ``2^a 5^b``)."""
    q = v.denominator
    for p in (2, 5):
        while q % p == 0:
            q //= p
    return q == 1


def rounds_to(value: Fraction, target: Fraction, places: int) -> bool:
    """Whether ``value`` rounded half away from zero to ``places`` decimals equals ``target``."""
    scale = Fraction(10) ** places
    scaled = abs(value) * scale
    n = int(scaled + Fraction(1, 2))  # floor(|x| + 1/2)
    rounded = Fraction(n if value >= 0 else -n) / scale
    return rounded == target


def numbers_match(pred: Num, gold: Num) -> bool:
    """Exact equality, or the rounded-reference rule (module doc)."""
    if pred.value == gold.value:
        return True
    if gold.places is not None and pred.places is None and not terminates(pred.value):
        return rounds_to(pred.value, gold.value, gold.places)
    return False


def percent_candidates(n: Num, has_pct: bool, other_has_pct: bool) -> list[Num]:
    """``[n]``, plus ``n / 100`` when only this side carries ``%`` (module doc)."""
    if has_pct and not other_has_pct:
        places = None if n.places is None else n.places + 2
        return [n, Num(n.value / 100, places)]
    return [n]
