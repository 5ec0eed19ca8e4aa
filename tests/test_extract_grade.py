"""Answer extraction, normalization and equivalence grading (satseq.rewards)."""
from __future__ import annotations

import concurrent.futures
import os
import time
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from satseq.errors import ConfigError
from satseq.rewards import grade
from satseq.rewards.extract import (
    extract_answer,
    extract_boxed,
    has_truncated_box,
    last_number,
    normalize_answer,
    parse_gsm8k_answer,
)
from satseq.rewards.grade import correctness_reward, is_equivalent, load_custom_reward

# --------------------------------------------------------------------------------------------
# The grading table: (pred, gold, expected)
# --------------------------------------------------------------------------------------------

EQUIVALENT = [
    ("5", "5"),
    ("1/2", "0.5"),
    ("\\frac12", "0.5"),
    ("\\frac{1}{2}", "1/2"),
    ("\\dfrac{3}{4}", "\\frac34"),
    ("0.75", "\\tfrac{3}{4}"),
    ("-\\frac{1}{2}", "-0.5"),
    ("\\frac{-1}{2}", "-\\frac12"),
    ("3.0", "3"),
    (".5", "0.5"),
    ("10.", "10"),
    ("1000", "1,000"),
    ("1,000,000", "1000000"),
    ("1{,}000", "1000"),
    ("$5$", "5"),
    ("\\(7\\)", "7"),
    ("\\boxed{7}", "7"),
    ("\\text{(B)}", "B"),
    ("(B)", "\\text{(B)}"),
    ("B", "(B)"),
    ("\\textbf{(C)}", "\\text{(C)}"),
    ("(D) 42", "D"),
    ("x = 5", "5"),
    ("5", "x=5"),
    ("90^\\circ", "90"),
    ("90", "90^{\\circ}"),
    ("45°", "45"),
    ("50\\%", "50"),
    ("0.5", "50\\%"),
    ("12 \\text{ cm}", "12"),
    ("\\$18.90", "18.9"),
    ("\\frac{270}7\\text{ degrees}", "\\frac{270}{7}"),
    ("2\\sqrt{2}", "\\sqrt{8}"),
    ("\\sqrt2", "\\sqrt{2}"),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3, \\pi/2)"),
    ("[-2, 7]", "x \\in [-2,7]"),
    ("(-\\infty, 0]", "(-\\infty,0]"),
    ("p - q", "-q + p"),
    ("x^2+2x+1", "(x+1)^2"),
    ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}"),
    ("\\{1, 2\\}", "\\{2,1\\}"),
    ("6+9i", "9i+6"),
    ("East", "\\text{east}"),
    ("1\\frac{4}{5}", "\\frac{9}{5}"),
    ("\\pi", "\\pi"),
    ("10^{10^{10}}", "10^{10^{10}}"),
    ("x" * 1500, "x" * 1500),
    ("52", "52_8"),
    ("1A_{16}", "1a_{16}"),
]

NOT_EQUIVALENT = [
    ("5", "6"),
    ("-5", "5"),
    ("1/2", "0.51"),
    ("0.33", "\\frac13"),
    ("0.333333", "\\frac{1}{3}"),  # an exact reference: no 6-digit rounding
    ("0.5\\%", "50\\%"),  # both percent: the numbers themselves must match
    ("\\frac{7}{\\boxed{3}}", "3"),  # a nested box never overrides its parent
    ("52_9", "52_8"),  # a numeral in another base
    ("a", "a_1"),  # a subscripted variable is not a base numeral
    ("\\frac{1}{2^{99}}", "\\frac{1}{2^{98}}"),  # not equal at 6 digits: compared exactly
    ("B", "C"),
    ("(A)", "\\text{(B)}"),
    ("42", "B"),
    ("1,2", "12"),
    ("(1,2)", "12"),
    ("[-2, 7]", "(-2, 7)"),
    ("x^2", "x^3"),
    ("\\sqrt{2}", "2"),
    ("5\\%", "0.5"),
    ("\\text{even}", "\\text{odd}"),
    ("10^{10^{10}}", "5"),
    ("5", "10^{10^{10}}"),
    ("2^{2^{2^{2^{2}}}}", "3"),
    ("99999!", "1"),
    ("__import__('os').system('echo pwned')", "0"),
    ("eval('1+1')", "2"),
    ("", "5"),
    (None, "5"),
    ("5", None),
    ("5", ""),
    ("\\boxed{", "5"),
    ("}{", "5"),
    ("\\frac{1}{0}", "0"),
    ("1" * 2000, "1" * 1999),
    ("9" * 1001, "9" * 1001 + "0"),
]

GRADE_TABLE = [(p, g, True) for p, g in EQUIVALENT] + [(p, g, False) for p, g in NOT_EQUIVALENT]


def test_grade_table_is_large():
    assert len(GRADE_TABLE) >= 60


@pytest.mark.parametrize("pred,gold,expected", GRADE_TABLE, ids=[f"{i}" for i in range(len(GRADE_TABLE))])
def test_grade_table(pred, gold, expected):
    start = time.monotonic()
    assert is_equivalent(pred, gold) is expected
    assert time.monotonic() - start < 3.0  # pathological inputs are refused, not ground on


def test_model_output_is_never_executed(monkeypatch):
    calls = []
    monkeypatch.setattr(os, "system", lambda *a, **k: calls.append(a) or 0)
    for text in ["__import__('os').system('x')", "os.system('x')", "\\boxed{__import__('os').system('x')}"]:
        assert correctness_reward(f"\\boxed{{{text}}}", "0") == 0.0
        assert is_equivalent(text, "0") is False
        assert is_equivalent(text, text) is True  # equal strings, still only compared as strings
    assert calls == []


def test_pathological_inputs_are_fast():
    for pred in ["10^{10^{10}}", "9^{9^{9^{9}}}", "2^{1234567890}", "123456!", "(10^{9})!"]:
        start = time.monotonic()
        assert is_equivalent(pred, "7") is False
        assert time.monotonic() - start < 0.5, pred


# --------------------------------------------------------------------------------------------
# Extraction
# --------------------------------------------------------------------------------------------

EXTRACT_TABLE = [
    ("The answer is \\boxed{5}.", "5"),
    ("first \\boxed{1} and later \\boxed{2}", "2"),
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("\\boxed{\\boxed{7}}", "7"),
    ("\\boxed{\\{1,2\\}}", "\\{1,2\\}"),
    ("$\\boxed 5$", "5"),
    ("so \\boxed 12.", "12"),
    ("\\fbox{12}", "12"),
    ("\\boxed{a} then \\boxedx", "a"),
    ("$\\boxed{x^{2}+1}$ done", "x^{2}+1"),
    ("\\boxed{5", None),
    ("\\boxed{1} and then \\boxed{2", None),
    ("\\boxed{}", None),
    ("The answer is $\\frac{1}{2}$.", "\\frac{1}{2}"),
    ("Thus, the final answer is 42.", "42"),
    ("Final answer: 17", "17"),
    ("Final Answer: The final answer is $5$. I hope it is correct.", "5"),
    ("The final answer is 3.5. I hope it is correct.", "3.5"),
    ("**Answer:** 42", "42"),
    ("work...\nAnswer: 7\n", "7"),
    ("Natalia sold 48 clips.\n#### 1,234", "1234"),
    ("3 plus 4 is 7", None),
    ("", None),
    (None, None),
]


@pytest.mark.parametrize("text,expected", EXTRACT_TABLE)
def test_extract_answer_table(text, expected):
    assert extract_answer(text) == expected


def test_truncated_box_has_no_answer_and_no_fallback():
    for text in ["The answer is 42. So \\boxed{42", "#### 42\nso \\boxed{4", "\\boxed{41} then \\boxed{42"]:
        assert extract_answer(text) is None
        assert extract_answer(text, last_number_fallback=True) is None
        assert extract_answer(text, mode="phrase") is None
        assert correctness_reward(text, "42") == 0.0
    assert has_truncated_box("\\boxed{1") and not has_truncated_box("\\boxed{1}") and not has_truncated_box(None)
    assert extract_answer("The answer is 42.") == "42"  # with no box at all the phrase still counts


def test_extract_boxed_only_boxes():
    assert extract_boxed("The answer is 5") is None
    assert extract_boxed("\\boxed{a}\\boxed{b}") == "b"
    assert extract_boxed("\\boxed{\\left(1,2\\right)}") == "\\left(1,2\\right)"
    # a literal escaped brace does not close the box
    assert extract_boxed("\\boxed{\\}}") == "\\}"
    assert extract_boxed("\\boxed{\\\\}") == "\\\\"


def test_extract_modes_and_last_number():
    text = "We get 3 then 1,000 apples"
    assert extract_answer(text) is None
    assert extract_answer(text, last_number_fallback=True) == "1000"
    assert extract_answer(text, mode="last_number") == "1000"
    assert extract_answer("\\boxed{4} #### 5", mode="gsm8k") == "5"
    assert extract_answer("#### 5 and \\boxed{4}", mode="boxed") == "4"
    assert extract_answer("the answer is 3", mode="boxed") is None
    assert last_number("ratio 3/4") == "3/4"
    assert last_number("x2 and -7.5") == "-7.5"
    with pytest.raises(ValueError):
        extract_answer("x", mode="nope")  # type: ignore[arg-type]


def test_parse_gsm8k_answer():
    assert parse_gsm8k_answer("She has 3.\n#### 1,018") == "1018"
    assert parse_gsm8k_answer("#### -3") == "-3"
    assert parse_gsm8k_answer("#### $5") == "5"
    assert parse_gsm8k_answer("a #### 1 b\n#### 2") == "2"
    assert parse_gsm8k_answer("no marker") is None
    assert parse_gsm8k_answer("####   ") is None


NORMALIZE_TABLE = [
    ("\\text{(B)}", "(B)"),
    ("1,000", "1000"),
    ("1,2", "1,2"),
    ("x = 5", "5"),
    ("a=1,b=2", "a=1,b=2"),
    ("90^\\circ", "90"),
    ("5\\%", "5"),
    ("\\$18.90", "18.90"),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})"),
    ("\\dfrac12", "\\frac{1}{2}"),
    ("\\frac 59", "\\frac{5}{9}"),
    ("\\cot x", "\\cot x"),
    ("p - q", "p-q"),
    ("$\\boxed{10}$", "10"),
    ("10.", "10"),
    ("12 \\text{ cm}^2", "12"),
    ("\\frac{7}{\\boxed{3}}", "\\frac{7}{3}"),  # a nested box is part of its parent
    ("\\boxed{\\boxed{3}^{2}}", "3^{2}"),
    ("2 1/3", "2\\frac{1}{3}"),  # a mixed number, not 21/3
    ("x=1, x=-2", "1,-2"),
    ("x = 1 \\text{ or } x = 2", "1,2"),
    ("60 km/h", "60"),
    ("12 \\pi \\text{ cm}^2", "12\\pi"),
    ("50 percent", "50"),
    ("\u2212\u03c0/6", "-\\pi /6"),
    ("sqrt(3)/2", "\\sqrt{3}/2"),
    ("(2, infinity)", "(2,\\infty)"),
    (None, ""),
]


@pytest.mark.parametrize("raw,expected", NORMALIZE_TABLE)
def test_normalize_answer(raw, expected):
    assert normalize_answer(raw) == expected


# --------------------------------------------------------------------------------------------
# Rewards
# --------------------------------------------------------------------------------------------


def test_correctness_reward():
    assert correctness_reward("so $\\boxed{\\dfrac{1}{2}}$", "0.5") == 1.0
    assert correctness_reward("so $\\boxed{\\dfrac{1}{3}}$", "0.5") == 0.0
    assert correctness_reward("The answer is 18.", "18") == 1.0
    assert correctness_reward("no answer", "18") == 0.0
    assert correctness_reward(None, "18") == 0.0
    assert correctness_reward("\\boxed{18", "18") == 0.0  # truncated box earns nothing


def test_load_custom_reward(tmp_path, monkeypatch):
    (tmp_path / "my_rewards.py").write_text(
        "def length_reward(prompt, response, answer):\n    return float(len(response))\n"
        "def one_arg(response):\n    return 0.0\n"
        "NOT_CALLABLE = 3\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    fn = load_custom_reward("my_rewards:length_reward")
    assert fn("p", "abc", "a") == 3.0
    fn2 = load_custom_reward(f"{tmp_path / 'my_rewards.py'}:length_reward")
    assert fn2("p", "ab", "a") == 2.0
    for spec, reason in [
        ("no_such_module_xyz:f", "ModuleNotFoundError"),
        ("my_rewards:missing", "has no attribute"),
        ("my_rewards", "expected 'module:function'"),
        ("my_rewards:NOT_CALLABLE", "not callable"),
        ("my_rewards:one_arg", "must accept (prompt, response, answer)"),
        (f"{tmp_path / 'nope.py'}:f", "not found"),
    ]:
        with pytest.raises(ConfigError) as exc:
            load_custom_reward(spec)
        msg = str(exc.value)
        assert msg.startswith(f"reward.custom: cannot import '{spec}' ("), msg
        assert reason in msg and "\n" not in msg


# --------------------------------------------------------------------------------------------
# Timeouts and threads
# --------------------------------------------------------------------------------------------


def test_grading_outside_the_main_thread():
    cases = [("2\\sqrt{2}", "\\sqrt{8}", True), ("x^2+2x+1", "(x+1)^2", True), ("3", "4", False),
             ("10^{10^{10}}", "5", False), ("\\frac{1}{2}", "0.5", True)]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(is_equivalent, p, g) for p, g, _ in cases]
        results = [f.result(timeout=30) for f in futures]
    assert results == [e for _, _, e in cases]


# --------------------------------------------------------------------------------------------
# Properties: no crash, no hang, on arbitrary input
# --------------------------------------------------------------------------------------------

_TOKENS = list("\\{}^_$()[]0123456789abx=+-*/!.,% ") + [
    "\\boxed", "\\boxed{", "\\frac", "\\fbox", "\\text{", "\\left(", "\\right)", "\\sqrt", "####", "^{",
]
LATEXISH = st.lists(st.sampled_from(_TOKENS), max_size=60).map("".join)
PROPS = settings(max_examples=80, deadline=timedelta(seconds=8),
                 suppress_health_check=[HealthCheck.too_slow], derandomize=True)


def _check_text(s: str) -> None:
    ans = extract_answer(s, last_number_fallback=True)
    assert ans is None or isinstance(ans, str)
    assert isinstance(normalize_answer(s), str)
    assert is_equivalent(s, "5", timeout=1.0) in (True, False)
    if ans is not None:
        assert is_equivalent(ans, ans, timeout=1.0) is True or not normalize_answer(ans)


@PROPS
@given(st.text(max_size=200))
def test_random_text_never_crashes(s):
    _check_text(s)


@PROPS
@given(LATEXISH)
def test_brace_heavy_text_never_crashes(s):
    _check_text(s)


@PROPS
@given(LATEXISH, LATEXISH)
def test_random_pairs_are_graded(a, b):
    assert is_equivalent(a, b, timeout=1.0) in (True, False)
    assert isinstance(correctness_reward(f"\\boxed{{{a}}}", b), float)
