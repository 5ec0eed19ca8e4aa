"""bench/methods/mlmt_decomposition.py: the first partial sum is read from the coach's turn of an MLMT episode and
from the one answer otherwise, only when its operands are the problem's first two numbers; final accuracy is
split by whether that partial sum was right; a malformed line names its file and line."""
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("mlmt_decomposition", ROOT / "bench" / "methods" / "mlmt_decomposition.py")
md = importlib.util.module_from_spec(spec)
spec.loader.exec_module(md)


def _write(d: Path, rows: list[dict]) -> Path:
    d.mkdir()
    (d / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


def test_partial_sum_needs_the_first_two_operands():
    assert md._partial_sum(" First add 4 + 4 = 8. Then add 7 to 8.", 4, 4) == 8
    assert md._partial_sum(" 4 + 4 + 7 = 18. The answer is 18.", 4, 4) is None  # "4 + 7 = 18" has other operands
    assert md._partial_sum(" 3 + 4 = 9. 9 + 5 = 14.", 3, 4) == 9
    assert md._partial_sum(" 4 + 4 + 4 = 12. The answer is 12.", 4, 4) is None  # the tail of the whole sum


def test_mlmt_rows_read_the_coach_and_one_pass_rows_the_answer(tmp_path):
    mlmt = _write(tmp_path / "mlmt_seed0", [{
        "problem": "What is 4 + 4 + 7?", "roles": ["solver", "coach", "solver"], "correct": [True, False, False],
        "responses": [[" 4 + 4 + 7 = 17.", " First add 4 + 4 = 8. Then add 7 to 8.", " 8 + 7 = 15."],
                      [" 4 + 4 + 7 = 18.", " First add 4 + 4 = 9. Then add 7 to 9.", " 9 + 7 = 16."],
                      [" 4 + 4 = 8. 8 + 7 = 15.", " Then add 7.", " 7."]]}])
    b = md.breakdown(mlmt)
    assert b["where"] == "coach"
    assert b["written"] == [True, True, False]  # the third coach turn writes no partial sum (its attempt does)
    assert b["right"] == [True, False]
    assert b["final_if_right"] == [True] and b["final_if_not"] == [False, False]
    assert b["final"] == [pytest.approx(1 / 3)]

    one = _write(tmp_path / "grpo_stepwise_seed0", [{
        "problem": "What is 1 + 2 + 3?", "agents": ["policy"], "correct": [True, False],
        "responses": [[" First add 1 + 2 = 3. Then add 3 to 3: 3 + 3 = 6. The answer is 6."],
                      [" 1 + 2 + 3 = 7. The answer is 7."]]}])
    b = md.breakdown(one)
    assert b["where"] == "answer" and b["written"] == [True, False] and b["final_if_right"] == [True]


def test_a_malformed_line_names_its_file_and_line(tmp_path):
    d = tmp_path / "e"
    d.mkdir()
    (d / "predictions.jsonl").write_text('{"problem": "What is 1 + 2 + 3?", "correct": [true], "responses": [[" 6."]]}\n{oops\n')
    with pytest.raises(SystemExit, match=r"predictions.jsonl:2: not JSON"):
        md.breakdown(d)
    with pytest.raises(SystemExit, match="not found"):
        md.breakdown(tmp_path / "missing")
