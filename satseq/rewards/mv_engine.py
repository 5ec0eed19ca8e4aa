"""The math-verify step, run inside a grading worker process (:mod:`satseq.rewards.grading_pool`).

Importing this module imports math-verify and sympy (the fork server preloads it). Nothing here
has a timeout of its own: the caller kills the worker process on expiry.

:func:`compare` is ``verify(parse(gold), parse(pred))`` (gold first, as math-verify's docs
require), each side wrapped in ``\\boxed{}`` and parsed with LaTeX extraction only (no
``ExprExtractionConfig``, so no plain text reaches sympy's ``parse_expr``), with the exact-number
rules of :mod:`satseq.rewards.numbers` put around it: when exactly one side is a plain number and
the other parses to a constant expression, the two are compared as numbers by those rules; when
both sides are real constant expressions, exactly (rationals) or to 40 digits, instead of
math-verify's 6-digit float rounding (``0.7071068`` is not ``\\frac{\\sqrt{2}}{2}``; ``\\sqrt{5}``
is ``2.24`` when the reference is that decimal).
"""
from __future__ import annotations

import logging
from fractions import Fraction

import math_verify
import sympy

from satseq.rewards.numbers import Num, numbers_match, rounds_to

__all__ = ["compare"]


class _DropTimeoutDisabledWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:  # noqa: A003
        msg = record.getMessage()
        return not (msg.startswith("Timeout is disabled") or msg.startswith("Timeout during"))


_FILTER = _DropTimeoutDisabledWarning()
for _name in ("math_verify.parser", "math_verify.grader", "math_verify.utils"):
    logging.getLogger(_name).addFilter(_FILTER)

_CONFIG = [math_verify.LatexExtractionConfig(boxed_match_priority=0)]
#: math-verify rounds numbers to this many decimals before comparing them (its default, 6, lets
#: ``(0.3333333, 2)`` equal ``(\\frac13, 2)``).
_FLOAT_DIGITS = 12


def _parse(s: str) -> list:
    return math_verify.parse(f"\\boxed{{{s}}}", extraction_config=_CONFIG, parsing_timeout=None)


def _constant(expr) -> tuple[Fraction, bool] | None:
    """``(value, exact)`` of a real constant expression: exact for a rational, else 50 digits."""
    if not isinstance(expr, sympy.Expr) or not expr.is_number:
        return None
    floats = expr.atoms(sympy.Float)
    if floats:
        expr = expr.xreplace({f: sympy.Rational(str(f)) for f in floats})
    expr = sympy.simplify(expr)
    if expr.is_Rational:
        return Fraction(int(expr.p), int(expr.q)), True
    approx = sympy.N(expr, 50)
    if not (approx.is_Float or approx.is_Rational):
        return None
    return Fraction(str(approx)), False


def _match_constant(nums: tuple, value: Fraction, exact: bool, num_is_gold: bool) -> bool:
    """A plain number (one of ``nums``, its percent readings) against a constant expression."""
    for n in nums:
        if exact:
            other = Num(value, None)
            if numbers_match(other, n) if num_is_gold else numbers_match(n, other):
                return True
        elif num_is_gold and n.places is not None:
            # an irrational answer against a rounded decimal reference
            if rounds_to(value, n.value, n.places):
                return True
        # an irrational reference is never equal to a plain number answer
    return False


def _constants_equal(a: tuple[Fraction, bool], b: tuple[Fraction, bool]) -> bool:
    """Two real constants: exactly when both are rational, else to 40 significant digits (not
    math-verify's 6-digit rounding, under which ``\\frac{1}{2^{99}}`` equals ``\\frac{1}{2^{98}}``)."""
    (av, a_exact), (bv, b_exact) = a, b
    if a_exact and b_exact:
        return av == bv
    return abs(av - bv) <= max(abs(av), abs(bv)) * Fraction(1, 10**40)


def compare(pred: str, gold: str, pred_nums: tuple = (), gold_nums: tuple = ()) -> bool:
    """Whether normalized ``pred`` equals normalized ``gold`` (module doc).

    ``pred_nums`` / ``gold_nums``: the side's :class:`~satseq.rewards.numbers.Num` readings when it is
    a plain number (two when it carries a lone ``%``), else empty.
    """
    try:
        g = _parse(gold)
        if not g:
            return False
        p = _parse(pred)
        if not p:
            return False
        if bool(pred_nums) != bool(gold_nums):
            expr = g[0] if pred_nums else p[0]
            const = _constant(expr)
            if const is not None:
                value, exact = const
                if pred_nums:
                    return _match_constant(pred_nums, value, exact, num_is_gold=False)
                return _match_constant(gold_nums, value, exact, num_is_gold=True)
        if not pred_nums and not gold_nums:
            gc = _constant(g[0])
            pc = _constant(p[0]) if gc is not None else None
            if gc is not None and pc is not None:
                return _constants_equal(gc, pc)
        return bool(math_verify.verify(g, p, float_rounding=_FLOAT_DIGITS, timeout_seconds=None))
    except Exception:  # noqa: BLE001 — unparsable means "not equal"
        return False



# ----------------------------------------------------------------------------------------------
# Worker process main loop: ``python -m satseq.rewards.mv_engine`` (started by grading_pool)
# ----------------------------------------------------------------------------------------------


def _read_exact(f, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = f.read(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def serve() -> None:  # pragma: no cover - runs in the worker process
    """Answer length-prefixed pickled ``compare`` argument tuples on stdin, one pickled bool each
    on stdout; exit on EOF or when the parent process is gone."""
    import os
    import pickle
    import signal
    import struct
    import sys
    import threading
    import time

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business
    parent = os.getppid()
    inp = os.fdopen(os.dup(0), "rb", buffering=0)
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # anything printed by a library goes to stderr, not into the protocol
    sys.stdout = sys.stderr

    def watch_parent() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch_parent, daemon=True).start()
    while True:
        head = _read_exact(inp, 4)
        if head is None:
            break
        body = _read_exact(inp, struct.unpack("<I", head)[0])
        if body is None:
            break
        try:
            args = pickle.loads(body)
            result = bool(compare(*args)) if args else True  # () is a ping (round-trip timing)
        except BaseException:  # noqa: BLE001 — any failure grades as "not equivalent"
            result = False
        out.write(b"1" if result else b"0")
    os._exit(0)


if __name__ == "__main__":  # pragma: no cover
    serve()
