"""The grading timeout (a killable worker process), the input guard and the exact-number rules."""
from __future__ import annotations

import concurrent.futures
import threading
import time
from fractions import Fraction

import pytest

from satseq.rewards import grade, grading_pool
from satseq.rewards.grade import extract_answer, is_equivalent
from satseq.rewards.guard import MAX_BRACE_DEPTH, looks_explosive, refusal
from satseq.rewards.numbers import (
    Num,
    numbers_match,
    parse_number,
    percent_candidates,
    rounds_to,
    terminates,
)

# Slip past the guard, and keep sympy busy for a minute or more (measured: (x+1)^{9999} vs 7, 73 s).
SLOW = ["(x+1)^{9999}", "(x+2)^{9999}", "(y+1)^{9999}", "(x+3)^{9999}", "(z+1)^{9999}", "(x+5)^{9999}"]
TIMEOUT = 1.0


@pytest.fixture(scope="module", autouse=True)
def warm_pool():
    assert grading_pool.warm(60.0)  # one-time start-up (fork server + sympy import) is not per call
    yield


def _timed(pred, gold, timeout=TIMEOUT):
    start = time.monotonic()
    result = is_equivalent(pred, gold, timeout=timeout)
    return result, time.monotonic() - start


def test_slow_answers_pass_the_guard():
    assert all(refusal(s) is None for s in SLOW)  # so the tests below exercise the hard kill


def test_pathological_answer_from_a_worker_thread():
    grade.clear_caches()
    before = grade.timeout_count()
    out = {}
    t = threading.Thread(target=lambda: out.update(r=_timed(SLOW[0], "7")))
    t.start()
    t.join(30)
    result, elapsed = out["r"]
    assert result is False
    assert elapsed < TIMEOUT + 1.0, elapsed
    assert grade.timeout_count() == before + 1
    # the killed worker is replaced: math-verify still answers
    assert is_equivalent("x^2+2x+1", "(x+1)^2", timeout=20) is True


def test_pathological_answers_in_a_batch_of_threads():
    grade.clear_caches()
    before = grade.timeout_count()
    pairs = [(s, "7") for s in SLOW[1:5]] + [("2\\sqrt{2}", "\\sqrt{8}"), ("5", "5"), ("3", "4")]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda pg: _timed(*pg), pairs))
    for (pred, _), (result, elapsed) in zip(pairs, results):
        assert elapsed < TIMEOUT + 1.0, (pred, elapsed)
    assert [r for r, _ in results[:4]] == [False] * 4
    assert [r for r, _ in results[5:]] == [True, False]  # the fast path never waits for a worker
    assert grade.timeout_count() >= before + 4


def test_sequential_batch_in_a_thread():
    grade.clear_caches()
    # two that time out, then one that a fresh worker answers (its own timeout generous: on a loaded
    # machine sympy may need more than a second for it, and this test is about the worker, not speed)
    pairs = [(SLOW[5], "7", TIMEOUT), ("1.2^{999999}", "1", TIMEOUT),
             ("\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}", 20.0)]
    out = []
    t = threading.Thread(target=lambda: out.extend(_timed(p, g, timeout) for p, g, timeout in pairs))
    t.start()
    t.join(60)
    assert [r for r, _ in out] == [False, False, True]
    assert all(e < timeout + 1.0 for (_, e), (_, _, timeout) in zip(out, pairs)), out


def test_configured_timeout_is_the_default(monkeypatch):
    grade.clear_caches()
    old = grade.grading_timeout()
    grade.set_grading_timeout(0.5)
    try:
        start = time.monotonic()
        assert is_equivalent("(w+1)^{9999}", "7") is False
        assert time.monotonic() - start < 1.5
    finally:
        grade.set_grading_timeout(old)
    with pytest.raises(ValueError):
        grade.set_grading_timeout(0)
    grade.clear_caches()
    killed = grading_pool.stats()["killed"]
    assert is_equivalent("x^2+4x+4", "(x+2)^2", timeout=0) is True  # 0 / None: the configured default
    assert grading_pool.stats()["killed"] == killed


def test_fast_path_never_uses_the_pool():
    grade.clear_caches()
    started = grading_pool.stats()["started"]
    sent = []
    real_run = grading_pool.run
    grading_pool_run = lambda args, timeout: sent.append(args) or real_run(args, timeout)  # noqa: E731
    grade.grading_pool.run = grading_pool_run
    try:
        t0 = time.perf_counter()
        for i in range(2000):
            is_equivalent(str(i), str(i % 7))
        per_call = (time.perf_counter() - t0) / 2000
        for p, g in [("1/2", "0.5"), ("50\\%", "\\frac12"), ("\\text{(B)}", "B"), ("12 \\text{ cm}", "12")]:
            assert is_equivalent(p, g) is True
    finally:
        grade.grading_pool.run = real_run
    assert sent == [] and grading_pool.stats()["started"] == started
    assert per_call < 200e-6, per_call


# ----------------------------------------------------------------------------------------------
# Guard
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("s,reason", [
    ("1" * 1001, "length"),
    ("{" * (MAX_BRACE_DEPTH + 1) + "1" + "}" * (MAX_BRACE_DEPTH + 1), "nesting"),
    ("\\frac{1}{" * 20 + "2" + "}" * 20, "nesting"),
    ("(" * 13 + "1" + ")" * 13, "nesting"),
    ("\\frac{1}{2", "unbalanced"),
    ("42}", "unbalanced"),
    ("10^{10^{10}}", "explosive"),
    ("2^3^4", "explosive"),
    ("2^{1234567}", "explosive"),
    ("99999!", "explosive"),
    ("(5!)!", "explosive"),
    ("(9999!)^{99999}", "explosive"),
    ("3\\uparrow\\uparrow 3", "explosive"),
    ("\\frac{\\sqrt{2}}{2}", None),
    ("\\begin{pmatrix} \\frac{1}{2} \\\\ \\frac{\\sqrt{3}}{2} \\end{pmatrix}", None),
    ("\\{1,2\\}", None),
    ("[-2, 7)", None),
    ("10!", None),
    ("2^{10}", None),
])
def test_guard(s, reason):
    assert refusal(s) == reason


def test_guarded_inputs_are_fast_and_false():
    for s in ["{" * 30 + "1" + "}" * 30, "\\frac{1}{" * 25 + "2" + "}" * 25, "(9999!)^{99999}"]:
        result, elapsed = _timed(s, "7", timeout=30)
        assert result is False and elapsed < 0.1, (s, elapsed)
        assert is_equivalent(s, s) is True  # equal strings are still equal
    assert not looks_explosive("x^2+2x+1")


# ----------------------------------------------------------------------------------------------
# Number rules
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("s,value,places", [
    ("-12", Fraction(-12), None),
    ("3.50", Fraction(7, 2), 2),
    (".5", Fraction(1, 2), 1),
    ("3/4", Fraction(3, 4), None),
    ("-\\frac{3}{4}", Fraction(-3, 4), None),
    ("\\frac{-3}{4}", Fraction(-3, 4), None),
    ("1\\frac{4}{5}", Fraction(9, 5), None),
    ("-2\\frac{1}{2}", Fraction(-5, 2), None),
    ("1.2\\times10^{3}", Fraction(1200), -2),
    ("1.2\\cdot 10^{-3}", Fraction(12, 10000), 4),
    ("6e3", Fraction(6000), None),
    ("0.\\overline{3}", Fraction(1, 3), None),
    ("1.2\\overline{45}", Fraction(137, 110), None),
    ("0.1666...", Fraction(1, 6), None),
    ("0.142857142857\\ldots", Fraction(1, 7), None),
    ("Twenty-five", Fraction(25), None),
])
def test_parse_number(s, value, places):
    assert parse_number(s) == Num(value, places)


@pytest.mark.parametrize("s", ["3.14159...", "2\\frac{7}{3}", "1/0", "\\frac{1}{0}", "x", "1,2", "\\sqrt{2}", ""])
def test_not_plain_numbers(s):
    assert parse_number(s) is None


def test_rounding_rules():
    assert terminates(Fraction(3, 40)) and not terminates(Fraction(1, 3))
    assert rounds_to(Fraction(1, 3), Fraction(33, 100), 2)
    assert rounds_to(Fraction(-2, 3), Fraction(-67, 100), 2)  # half away from zero, symmetric
    assert rounds_to(Fraction(1, 8), Fraction(13, 100), 2)  # 0.125 -> 0.13
    assert not rounds_to(Fraction(1, 3), Fraction(34, 100), 2)
    assert rounds_to(Fraction(6022, 1000) * 10**23, Fraction(6) * 10**23, -23)
    third, dec = Num(Fraction(1, 3), None), Num(Fraction(33, 100), 2)
    assert numbers_match(third, dec)  # exact non-terminating answer vs a rounded reference
    assert not numbers_match(dec, third)  # a rounded answer vs an exact reference
    assert not numbers_match(Num(Fraction(333, 1000), 3), dec)  # a decimal answer must be exact
    assert not numbers_match(Num(Fraction(1, 4), None), Num(Fraction(3, 10), 1))  # 1/4 terminates


def test_percent_candidates():
    fifty = Num(Fraction(50), None)
    assert percent_candidates(fifty, True, False) == [fifty, Num(Fraction(1, 2), None)]
    assert percent_candidates(fifty, True, True) == [fifty]
    assert percent_candidates(Num(Fraction(125, 10), 1), True, False)[1] == Num(Fraction(1, 8), 3)


def test_reward_timeout_config_is_read_at_run_setup(monkeypatch):
    from satseq import runtime
    from satseq.config import TrainConfig

    class Stop(Exception):
        pass

    def stop(cfg):
        raise Stop

    cfg = TrainConfig()
    cfg.reward.timeout = 2.5
    old = grade.grading_timeout()
    monkeypatch.setattr(runtime, "setup_torch", stop)
    try:
        with pytest.raises(Stop):
            runtime.build_runtime(cfg, method=None)
        assert grade.grading_timeout() == 2.5
    finally:
        grade.set_grading_timeout(old)


# ----------------------------------------------------------------------------------------------
# Grader-breaking responses: each returns a bool within timeout + 1 s
# ----------------------------------------------------------------------------------------------

BREAKERS = [
    "\\boxed{(9999!)^{99999}}", "\\boxed{10^{10^{10^{10}}}}", "\\boxed{2^{2^{2^{2^{2^{2}}}}}}", "\\boxed{9^9^9^9}",
    "\\boxed{99999999!}", "\\boxed{(10^{100})!}", "\\boxed{((5!)!)!}", "\\boxed{3\\uparrow\\uparrow\\uparrow 3}",
    "\\boxed{2^{123456789}}", "\\boxed{1.0001^{99999999}}", "\\boxed{(x+1)^{9999}}", "\\boxed{(x+y)^{5000}}",
    "\\boxed{" + "{" * 40 + "1" + "}" * 40 + "}", "\\boxed{" + "\\frac{1}{" * 30 + "2" + "}" * 30 + "}",
    "\\boxed{" + "(" * 200 + "1" + ")" * 200 + "}", "\\boxed{" + "\\sqrt{" * 50 + "2" + "}" * 50 + "}",
    "\\boxed{" + "[" * 100 + "}", "\\boxed{" + "1+" * 2000 + "1}", "\\boxed{" + "x" * 5000 + "}",
    "\\boxed{" * 300 + "1" + "}" * 300, "\\boxed{\\frac{7}{\\boxed{3}}}", "\\boxed{42", "The answer is \\boxed{42",
    "\\boxed{__import__('os').system('true')}", "\\boxed{eval('2+2')}", "\\boxed{lambda: 1}",
    "\\boxed{\\begin{pmatrix}" + "1&" * 300 + "1\\end{pmatrix}}", "\\boxed{\\sum_{n=1}^{10^{12}} n}",
    "\\boxed{\\int_0^{10^{9}} e^{x^2} dx}", "\\boxed{\\prod_{k=1}^{99999} k}", "\\boxed{\\lim_{x\\to\\infty} x^x}",
    "\\boxed{\\sin(10^{99999})}", "\\boxed{\\binom{10^{6}}{500000}}", "\\boxed{\\gcd(2^{99999}-1, 3^{99999}-1)}",
    "\\boxed{\x00\x01\x02}", "\\boxed{\u202e5\u202d}", "\\boxed{" + "\\left(" * 100 + "}", "\\boxed{}}}}}{{{{",
    "\\boxed{1/0}", "\\boxed{0^{-1}}",
]


def test_grader_breaking_responses_return_a_bool_in_time():
    assert len(BREAKERS) == 40
    grade.clear_caches()
    slowest, old = 0.0, grade.grading_timeout()
    grade.set_grading_timeout(TIMEOUT)  # correctness_reward uses the configured timeout
    try:
        _grade_breakers(BREAKERS)
    finally:
        grade.set_grading_timeout(old)


def _grade_breakers(texts):
    slowest = 0.0
    for text in texts:
        start = time.monotonic()
        reward = grade.correctness_reward(text, "7")
        pred = grade.extract_answer(text)
        same = is_equivalent(pred, pred, timeout=TIMEOUT) if pred is not None else None
        elapsed = time.monotonic() - start
        assert reward in (0.0, 1.0) and same in (True, False, None), text[:60]
        slowest = max(slowest, elapsed)
    assert slowest < 2 * TIMEOUT + 1.0  # two gradings per response, each within its timeout


def test_constants_compare_exactly_not_at_six_digits():
    from satseq.rewards.mv_engine import _constants_equal, compare

    assert not _constants_equal((Fraction(1, 2**99), True), (Fraction(1, 2**98), True))
    assert _constants_equal((Fraction(1, 2**98), True), (Fraction(2, 2**99), True))
    root2 = Fraction("1.4142135623730950488016887242096980785696718753769")  # 50 digits
    assert _constants_equal((root2, False), (root2 + Fraction(1, 10**49), False))
    assert not _constants_equal((root2, False), (root2 + Fraction(1, 10**30), False))
    assert compare("\\frac{1}{2^{99}}", "\\frac{1}{2^{98}}") is False  # math-verify alone says True
    assert compare("\\sqrt{3+2\\sqrt{2}}", "1+\\sqrt{2}") is True


# ----------------------------------------------------------------------------------------------
# Properties (hypothesis)
# ----------------------------------------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_NUMBERISH = st.lists(st.sampled_from(list("0123456789-+./{}^_eE%") + ["\\frac{", "\\overline{", "\\times10^{", "\\cdot"]),
                      max_size=30).map("".join)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.one_of(_NUMBERISH, st.text(max_size=60)))
def test_number_parsing_and_guard_never_raise(s):
    n = parse_number(s)
    assert n is None or (isinstance(n.value, Fraction) and numbers_match(n, n))
    assert refusal(s) in (None, "length", "nesting", "unbalanced", "explosive")


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.fractions(max_denominator=10**6).filter(lambda v: abs(v) < 10**9), st.integers(0, 8))
def test_rounding_a_value_gives_a_reference_it_matches(v, places):
    scale = Fraction(10) ** places
    n = int(abs(v) * scale + Fraction(1, 2))
    ref = Fraction(n if v >= 0 else -n) / scale
    assert rounds_to(v, ref, places)
    gold = Num(ref, places)
    assert numbers_match(Num(v, None), gold) is (v == ref or not terminates(v))
    assert numbers_match(Num(ref + Fraction(1, 10 ** (places + 9)), places + 9), gold) is False
