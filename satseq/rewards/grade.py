"""Answer equivalence and the correctness reward.

``is_equivalent(pred, gold)`` decides in three steps, cheapest first:

1. **fast path** on :func:`~satseq.rewards.extract.normalize_answer` forms: equal strings;
   multiple-choice letters (``(B)``, ``B``, ``\\text{(B)}``); equal plain words up to case
   (``East`` == ``\\text{east}``); exact rational equality of plain
   numbers (``1/2 == 0.5 == \\frac12``; a ``%`` on either side also accepts the value / 100);
   two unequal plain numbers without a decimal point are final (no math-verify call);
2. a **guard**: expressions whose evaluation can explode (a power whose exponent holds another
   power or factorial, ``10^{10^{10}}``; an exponent of 7+ digits; the factorial of a 5+ digit
   number) are never handed to sympy; they only match by step 1;
3. **math-verify**, gold first, as its docs require: ``verify(parse(gold), parse(pred))``, each side
   wrapped in ``\\boxed{}`` and parsed with LaTeX extraction only (``ExprExtractionConfig`` is not
   used, so no plain-text expression reaches sympy's ``parse_expr``; model output is never
   evaluated as code).

Timeouts. math-verify's own timeouts call ``signal.alarm``, which raises ``ValueError`` outside the
main thread (read in math_verify 0.9 ``utils.timeout``) and only takes whole seconds. So math-verify
is always called with its timeouts off (``parsing_timeout=None``, ``timeout_seconds=None``) and:

- in the main thread, one ``setitimer(ITIMER_REAL)`` deadline of ``timeout`` seconds covers the
  parse of both sides and the comparison (it re-fires every 0.1 s until cleared, in case a library
  swallows the first exception); a timeout grades as not equivalent;
- in any other thread, no signal can be used; safety rests on the guard (step 2) and on the input
  cap: an answer longer than :data:`MAX_ANSWER_CHARS` is compared by exact string equality only.

Results are cached (``lru_cache``) on the normalized pair.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import logging
import re
import signal
import sys
import threading
import time
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from satseq.errors import ConfigError
from satseq.rewards.extract import _match_braces, extract_answer, normalize_answer

__all__ = [
    "MAX_ANSWER_CHARS",
    "is_equivalent",
    "correctness_reward",
    "load_custom_reward",
    "RewardFn",
]

#: Answers longer than this are graded by exact string equality only (no parser is run).
MAX_ANSWER_CHARS = 1000

RewardFn = Callable[[str, str, str], float]


# ----------------------------------------------------------------------------------------------
# Fast path
# ----------------------------------------------------------------------------------------------

_CHOICE_RE = re.compile(r"\(?([A-E])[).:]?")
_CHOICE_PREFIX_RE = re.compile(r"\(([A-E])\)")
_WORD_RE = re.compile(r"[A-Za-z]{2,}(?: [A-Za-z]+)*")
_INT_RE = re.compile(r"[-+]?\d+")
_DEC_RE = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+)")
_SLASH_RE = re.compile(r"([-+]?\d+)/([-+]?\d+)")
_FRAC_RE = re.compile(r"(-?)\\frac\{([-+]?\d+)\}\{([-+]?\d+)\}")


def _choice_letter(s: str) -> str | None:
    """``B`` for a normalized multiple-choice answer ``B``, ``(B)``, ``B)``, ``B.``; else None."""
    m = _CHOICE_RE.fullmatch(s)
    return m.group(1) if m else None


def _to_number(s: str) -> tuple[Fraction, bool] | None:
    """``(value, has_decimal_point)`` for a plain integer, decimal, ``a/b`` or ``\\frac{a}{b}``."""
    if _INT_RE.fullmatch(s):
        return Fraction(int(s)), False
    if _DEC_RE.fullmatch(s):
        return Fraction(s), True
    m = _SLASH_RE.fullmatch(s)
    if m and int(m.group(2)) != 0:
        return Fraction(int(m.group(1)), int(m.group(2))), False
    m = _FRAC_RE.fullmatch(s)
    if m and int(m.group(3)) != 0:
        v = Fraction(int(m.group(2)), int(m.group(3)))
        return (-v if m.group(1) else v), False
    return None


# ----------------------------------------------------------------------------------------------
# Guard against expressions whose evaluation explodes
# ----------------------------------------------------------------------------------------------


def _exponent_args(s: str):
    """Yield the argument of every ``^`` (a braced group, or the next token)."""
    for m in re.finditer(r"\^", s):
        j = m.end()
        while j < len(s) and s[j] == " ":
            j += 1
        if j < len(s) and s[j] == "{":
            close = _match_braces(s, j)
            yield s[j + 1 : close] if close is not None else s[j + 1 :]
        else:
            tok = re.match(r"\\?[A-Za-z]+|\d+|.", s[j:])
            yield tok.group(0) if tok else ""


def _looks_explosive(s: str) -> bool:
    """True for ``10^{10^{10}}``-like towers, huge exponents or huge factorials (see module doc)."""
    if "^" in s:
        for arg in _exponent_args(s):
            if "^" in arg or "!" in arg or "\\uparrow" in arg:
                return True
            digits = re.sub(r"\D", "", arg)
            if len(digits) >= 7:
                return True
        if re.search(r"\^\s*\d+\s*\^", s):  # 2^3^4 (no braces)
            return True
    if "!" in s:
        if re.search(r"\d{5,}\s*!", s):
            return True
        # the factorial of a group that holds a power or another factorial: (10^{9})!, (5!)!
        if re.search(r"[)}]\s*!", s) and ("^" in s or s.count("!") > 1):
            return True
    return "\\uparrow" in s


# ----------------------------------------------------------------------------------------------
# math-verify with a deadline
# ----------------------------------------------------------------------------------------------


class _Deadline(BaseException):
    """Raised by our SIGALRM handler; a BaseException so math-verify's ``except Exception`` lets it through."""


class _DropTimeoutDisabledWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:  # noqa: A003
        msg = record.getMessage()
        return not (msg.startswith("Timeout is disabled") or msg.startswith("Timeout during"))


_mv_lock = threading.Lock()
_mv_state: dict[str, Any] = {}


def _math_verify():
    """Import math-verify once (lazily: it pulls in sympy) and silence its timeout-off warning."""
    if not _mv_state:
        with _mv_lock:
            if not _mv_state:
                import math_verify  # noqa: WPS433

                flt = _DropTimeoutDisabledWarning()
                for name in ("math_verify.parser", "math_verify.grader", "math_verify.utils"):
                    logging.getLogger(name).addFilter(flt)
                _mv_state["parse"] = math_verify.parse
                _mv_state["verify"] = math_verify.verify
                _mv_state["config"] = [math_verify.LatexExtractionConfig(boxed_match_priority=0)]
    return _mv_state


def _signal_deadline_available() -> bool:
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


def _call_with_deadline(fn: Callable[[], Any], seconds: float) -> Any:
    """Run ``fn()`` under a SIGALRM deadline (main thread only); raises :class:`_Deadline`."""
    active = [True]

    def handler(signum, frame):
        if active[0]:
            raise _Deadline()

    old_handler = signal.signal(signal.SIGALRM, handler)
    old_delay, old_interval = signal.setitimer(signal.ITIMER_REAL, seconds, 0.1)
    start = time.monotonic()
    try:
        return fn()
    finally:
        while True:  # a late alarm may interrupt the cleanup itself; retry until disarmed
            try:
                active[0] = False
                signal.setitimer(signal.ITIMER_REAL, 0)
                break
            except _Deadline:
                continue
        signal.signal(signal.SIGALRM, old_handler)
        if old_delay > 0:  # re-arm a timer the caller had set, minus the time we used
            signal.setitimer(
                signal.ITIMER_REAL, max(old_delay - (time.monotonic() - start), 1e-3), old_interval
            )


def _math_verify_equal(pred: str, gold: str, timeout: float | None) -> bool:
    """``verify(parse(gold), parse(pred))`` on ``\\boxed{}``-wrapped strings; False on any failure."""
    mv = _math_verify()

    def run() -> bool:
        g = mv["parse"](f"\\boxed{{{gold}}}", extraction_config=mv["config"], parsing_timeout=None)
        if not g:
            return False
        p = mv["parse"](f"\\boxed{{{pred}}}", extraction_config=mv["config"], parsing_timeout=None)
        if not p:
            return False
        return bool(mv["verify"](g, p, timeout_seconds=None))

    try:
        if timeout is not None and timeout > 0:
            return bool(_call_with_deadline(run, timeout))
        return run()
    except _Deadline:
        return False
    except Exception:  # noqa: BLE001 — a grader never crashes a run; unparsable means "not equal"
        return False


# ----------------------------------------------------------------------------------------------
# Public API
# ----------------------------------------------------------------------------------------------


@lru_cache(maxsize=65536)
def _equivalent_normalized(
    pred: str, gold: str, pred_pct: bool, gold_pct: bool, timeout: float | None
) -> bool:
    if not pred or not gold:
        return False
    if pred == gold:
        return True
    letter = _choice_letter(gold)
    if letter is not None:
        p_letter = _choice_letter(pred)
        if p_letter is None:
            m = _CHOICE_PREFIX_RE.match(pred)
            p_letter = m.group(1) if m else None
        return p_letter == letter
    if pred.lower() == gold.lower() and _WORD_RE.fullmatch(gold):
        return True  # text answers: "East" == "\\text{east}" (unequal words go on to math-verify)
    a, b = _to_number(pred), _to_number(gold)
    if a is not None and b is not None:
        (pv, p_dec), (gv, g_dec) = a, b
        if pv == gv or (gold_pct and pv == gv / 100) or (pred_pct and pv / 100 == gv):
            return True
        if not (p_dec or g_dec):
            return False  # two exact rationals that differ: final
    if _looks_explosive(pred) or _looks_explosive(gold):
        return False
    return _math_verify_equal(pred, gold, timeout)


def is_equivalent(pred: str | None, gold: str | None, timeout: float = 5.0) -> bool:
    """Whether the answer ``pred`` is mathematically equivalent to the reference ``gold``.

    Both are final answers (already extracted), e.g. ``"\\frac{1}{2}"`` and ``"0.5"``. Never
    raises on any input; ``None`` or empty is never equivalent. See the module docstring for the
    three steps, the timeout (``timeout`` seconds, main thread only) and the input cap.
    """
    if pred is None or gold is None:
        return False
    pred, gold = str(pred), str(gold)
    if len(pred) > MAX_ANSWER_CHARS or len(gold) > MAX_ANSWER_CHARS:
        return bool(pred.strip()) and pred.strip() == gold.strip()
    try:
        p, g = normalize_answer(pred), normalize_answer(gold)
    except RecursionError:
        return False
    deadline = float(timeout) if (timeout and _signal_deadline_available()) else None
    return _equivalent_normalized(p, g, "%" in pred, "%" in gold, deadline)


def correctness_reward(response: str | None, answer: str | None, *, mode: str = "auto") -> float:
    """1.0 if the answer extracted from ``response`` (``extract_answer``) equals ``answer``, else 0.0."""
    pred = extract_answer(response, mode=mode)  # type: ignore[arg-type]
    if pred is None:
        return 0.0
    return 1.0 if is_equivalent(pred, answer) else 0.0


def import_object(spec: str, key: str = "reward.custom", what: str = "module:function") -> Any:
    """Import ``"package.module:attr"`` (or ``"path/to/file.py:attr"``); any failure is a one-line
    ``ConfigError("<key>: cannot import 'x:y' (<reason>)")``."""

    def fail(reason: str) -> ConfigError:
        return ConfigError(f"{key}: cannot import {spec!r} ({reason})")

    if not isinstance(spec, str) or spec.count(":") < 1:
        raise fail(f"expected '{what}'")
    mod_name, _, attr = spec.rpartition(":")
    if not mod_name or not attr:
        raise fail(f"expected '{what}'")
    try:
        if mod_name.endswith(".py"):
            path = Path(mod_name)
            if not path.is_file():
                raise fail(f"file {mod_name} not found")
            name = f"satseq_custom_reward_{abs(hash(str(path.resolve())))}"
            loader_spec = importlib.util.spec_from_file_location(name, path)
            if loader_spec is None or loader_spec.loader is None:
                raise fail(f"cannot load {mod_name}")
            module = importlib.util.module_from_spec(loader_spec)
            sys.modules[name] = module
            loader_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(mod_name)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 — user code: report whatever it raised, in one line
        raise fail(f"{type(e).__name__}: {e}") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise fail(f"module {mod_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise fail(f"{attr!r} is not callable")
    return obj


def load_custom_reward(spec: str) -> RewardFn:
    """Import a user reward ``"package.module:function"`` (or ``"path/to/file.py:function"``).

    The function is called as ``fn(prompt, response, answer) -> float``. Any failure (bad spec,
    import error, missing attribute, not callable, wrong signature) raises
    ``ConfigError("reward.custom: cannot import 'x:y' (<reason>)")``.
    """
    obj = import_object(spec)
    try:
        inspect.signature(obj).bind("prompt", "response", "answer")
    except TypeError as e:
        raise ConfigError(f"reward.custom: cannot import {spec!r} (it must accept (prompt, response, answer): {e})") from None
    except ValueError:
        pass  # builtins without a signature: trust the user
    return obj
