"""Answer equivalence and the correctness reward. The rules, with examples: docs/grading.md.

``is_equivalent(pred, gold)`` decides in four steps, cheapest first:

1. **normalize** both sides (:func:`~satseq.rewards.extract.normalize_answer`: ``$``, ``\\text``,
   units, degrees, ``x =``, thousands separators, a nested ``\\boxed`` -> its content, ...);
2. **fast path**, in-process, microseconds: equal strings; multiple-choice letters (``(B)``, ``B``,
   ``\\text{(B)}``); equal plain words up to case; and, when both sides are plain numbers, the exact
   rational rules of :mod:`satseq.rewards.numbers` (exact equality; a tolerance only for an exact
   non-terminating answer against a decimal reference; percent read as /100 only when one side
   carries ``%``). A verdict here is final: the thousands of plain-integer answers a training
   stage grades never leave the process;
3. **guard** (:mod:`satseq.rewards.guard`): too long, too deeply nested, unbalanced or explosive
   answers are refused (not equivalent unless equal strings);
4. **math-verify** in a worker process (:mod:`satseq.rewards.grading_pool`,
   :mod:`satseq.rewards.mv_engine`), killed after ``timeout`` seconds; a timeout grades as not
   equivalent and is counted (:func:`timeout_count`, logged as ``reward/timeouts``).

``timeout=None`` means the configured default (:func:`set_grading_timeout`, from ``reward.timeout``;
5 s). Works the same from any thread. Results are cached on the normalized pair (a timeout that was
only a wait for a busy worker is not cached).
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
import sys
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from satseq.errors import ConfigError
import satseq.rewards.grading_pool as grading_pool
from satseq.rewards.extract import extract_answer, normalize_answer
from satseq.rewards.guard import MAX_ANSWER_CHARS, refusal
from satseq.rewards.numbers import numbers_match, parse_number, percent_candidates

__all__ = [
    "MAX_ANSWER_CHARS",
    "is_equivalent",
    "correctness_reward",
    "load_custom_reward",
    "set_grading_timeout",
    "grading_timeout",
    "timeout_count",
    "RewardFn",
]

RewardFn = Callable[[str, str, str], float]

_DEFAULT_TIMEOUT = 5.0
_state = {"timeout": _DEFAULT_TIMEOUT, "timeouts": 0}
_state_lock = threading.Lock()


def set_grading_timeout(seconds: float) -> None:
    """The default ``timeout`` of :func:`is_equivalent` (``reward.timeout``; set at run set-up)."""
    seconds = float(seconds)
    if not seconds > 0:
        raise ValueError(f"reward.timeout must be > 0, got {seconds}")
    _state["timeout"] = seconds


def grading_timeout() -> float:
    """The current default grading timeout in seconds."""
    return _state["timeout"]


def timeout_count() -> int:
    """How many gradings in this process have expired (cumulative; the loop logs per-stage deltas)."""
    return _state["timeouts"]


# ----------------------------------------------------------------------------------------------
# Fast path
# ----------------------------------------------------------------------------------------------

_CHOICE_RE = re.compile(r"\(?([A-E])[).:]?")
_CHOICE_PREFIX_RE = re.compile(r"\(([A-E])\)")
_WORD_RE = re.compile(r"[A-Za-z]{2,}(?: [A-Za-z]+)*")
_BASE_RE = re.compile(r"(-?[0-9A-Fa-f]+)_\{?(\d{1,2})\}?")
_VAR_RE = re.compile(r"\s*[A-Za-z]\s*=?\s*")
_PLAIN_INT_RE = re.compile(r"\s*[-+]?\d{1,40}\s*")
_normalize = lru_cache(maxsize=65536)(normalize_answer)
_PERCENT_RE = re.compile(r"%|\bpercent\b", re.IGNORECASE)


def _choice_letter(s: str) -> str | None:
    """``B`` for a normalized multiple-choice answer ``B``, ``(B)``, ``B)``, ``B.``; else None."""
    m = _CHOICE_RE.fullmatch(s)
    return m.group(1) if m else None


def _readings(s: str, pct: bool, other_pct: bool) -> tuple:
    n = parse_number(s)
    return tuple(percent_candidates(n, pct, other_pct)) if n is not None else ()


def _base_numeral(s: str):
    """The match of ``DIGITS_BASE`` when the digits are valid in that base (so ``a_1``, ``x_2``
    and ``19_8`` are not numerals), else None."""
    m = _BASE_RE.fullmatch(s)
    if m is None or not 2 <= int(m.group(2)) <= 36:
        return None
    try:
        int(m.group(1), int(m.group(2)))
    except ValueError:
        return None
    return m


def _base_verdict(pred: str, gold: str) -> bool | None:
    """A numeral in a base (``52_8``, ``4210_{5}``): the digits must match, and the bases when both
    sides write one (``52_9`` is not ``52_8``; ``52`` for ``52_8`` is right). None if neither side is one."""
    pm, gm = _base_numeral(pred), _base_numeral(gold)
    if pm is None and gm is None:
        return None
    p_digits, p_base = (pm.group(1), pm.group(2)) if pm else (pred, None)
    g_digits, g_base = (gm.group(1), gm.group(2)) if gm else (gold, None)
    if p_base is not None and g_base is not None and int(p_base) != int(g_base):
        return False
    return p_digits.upper() == g_digits.upper() and bool(re.fullmatch(r"-?[0-9A-Za-z]+", p_digits))


@lru_cache(maxsize=65536)
def _fast_verdict(pred: str, gold: str, pred_pct: bool, gold_pct: bool) -> bool | None:
    """True / False when decided without math-verify, else None."""
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
    base = _base_verdict(pred, gold)
    if base is not None:
        return base
    if refusal(pred) or refusal(gold):
        return False
    ps, gs = _readings(pred, pred_pct, gold_pct), _readings(gold, gold_pct, pred_pct)
    if ps and gs:
        return any(numbers_match(p, g) for p in ps for g in gs)
    return None


_slow_cache: dict = {}
_SLOW_CACHE_MAX = 65536


def _slow_verdict(pred: str, gold: str, pred_pct: bool, gold_pct: bool, timeout: float) -> bool:
    key = (pred, gold, pred_pct, gold_pct)
    hit = _slow_cache.get(key)
    if hit is not None:
        return hit
    args = (pred, gold, _readings(pred, pred_pct, gold_pct), _readings(gold, gold_pct, pred_pct))
    status, value = grading_pool.run(args, timeout)
    if status == "ok":
        result = bool(value)
    else:
        result = False
        if status in ("timeout", "busy"):
            with _state_lock:
                _state["timeouts"] += 1
        if status != "timeout":
            return result  # a busy pool or a dead worker says nothing about this pair
    if len(_slow_cache) >= _SLOW_CACHE_MAX:
        _slow_cache.clear()
    _slow_cache[key] = result
    return result


def _math_verify_equal(pred: str, gold: str, timeout: float | None = None) -> bool:
    """math-verify alone, through a worker (no normalization, fast path, guard or cache): for checks
    such as "every benchmark answer parses and verifies against its normalized form"."""
    status, value = grading_pool.run((pred, gold, (), ()), _state["timeout"] if timeout is None else timeout)
    return status == "ok" and bool(value)


def clear_caches() -> None:
    """Forget every cached verdict (tests)."""
    _fast_verdict.cache_clear()
    _normalize.cache_clear()
    _slow_cache.clear()


# ----------------------------------------------------------------------------------------------
# Public API
# ----------------------------------------------------------------------------------------------


def is_equivalent(pred: str | None, gold: str | None, timeout: float | None = None) -> bool:
    """Whether the answer ``pred`` is mathematically equivalent to the reference ``gold``.

    Both are final answers (already extracted), e.g. ``"\\frac{1}{2}"`` and ``"0.5"``. Never
    raises on any input; ``None`` or empty is never equivalent. ``timeout``: seconds for the
    math-verify step (None or <= 0: :func:`grading_timeout`); it holds in any thread. See the module doc.
    """
    if pred is None or gold is None:
        return False
    pred, gold = str(pred), str(gold)
    if _PLAIN_INT_RE.fullmatch(pred) and _PLAIN_INT_RE.fullmatch(gold):
        return int(pred) == int(gold)  # the common case in training: two plain integers, ~1 us
    if len(pred) > MAX_ANSWER_CHARS or len(gold) > MAX_ANSWER_CHARS:
        return bool(pred.strip()) and pred.strip() == gold.strip()
    if "\\approx" in gold or "\\approx" in pred:
        # "\\frac23 \\approx 0.67": the reference accepts each of its forms; an answer is its first
        golds = [part for part in gold.split("\\approx") if part.strip()] or [gold]
        forms = [part for part in pred.split("\\approx") if part.strip() and not _VAR_RE.fullmatch(part)]
        first = forms[0] if forms else pred  # "x \\approx 3.14": the variable is not a form
        return any(_equivalent(first, g, timeout) for g in golds)
    return _equivalent(pred, gold, timeout)


def _equivalent(pred: str, gold: str, timeout: float | None) -> bool:
    try:
        p, g = _normalize(pred), _normalize(gold)
    except RecursionError:
        return False
    p_pct, g_pct = bool(_PERCENT_RE.search(pred)), bool(_PERCENT_RE.search(gold))
    verdict = _fast_verdict(p, g, p_pct, g_pct)
    if verdict is not None:
        return verdict
    t = float(timeout) if timeout is not None and timeout > 0 else _state["timeout"]
    return _slow_verdict(p, g, p_pct, g_pct, t)


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
