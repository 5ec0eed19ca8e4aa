"""bench/studies/roles_seats.py: the per-seat figures of issue 63's studies, against counts done by hand on
prediction lines of each shape, and its table over seeds on a study laid out as `satseq compare` writes it."""
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("roles_seats", ROOT / "bench" / "studies" / "roles_seats.py")
roles_seats = importlib.util.module_from_spec(spec)
spec.loader.exec_module(roles_seats)


def _code_answer(correct, output_correct, answers, output):
    return {"correct": correct, "output_correct": output_correct, "answers": answers, "output": output}


def test_code_answer_seats_count_the_coder_the_answerer_and_the_copies():
    lines = [_code_answer([True, False], [True, True], ["5", "4"], ["5", "5"]),
             _code_answer([True, True], [False, True], ["7", "8"], ["6", "8"])]
    f = roles_seats.seat_figures(lines)
    assert f["final"] == f["answerer"] == pytest.approx(3 / 4)
    assert f["coder"] == pytest.approx(3 / 4)
    # of the 3 right answers, two are what the program printed ("5", "8"); "7" was not ("6" was printed)
    assert f["answerer_copies"] == pytest.approx(2 / 3)


def test_check_revise_seats_balanced_accuracy_and_revisions():
    line = {"roles": ["solver", "checker", "reviser"], "turn1_correct": [True, False, False, True],
            "verdicts": [["correct"], ["wrong"], [], ["wrong"]], "tool_calls": [["p"], [], ["p", "q"], []],
            "revised": [False, True, True, True], "correct": [True, True, False, False]}
    f = roles_seats.seat_figures([line])
    assert f["solver"] == pytest.approx(0.5)
    # right attempts: verdicts correct, wrong -> recall 1/2; wrong attempts: wrong, missing -> 1/2
    assert f["checker_balanced"] == pytest.approx(0.5)
    assert f["checker_programs"] == pytest.approx(3 / 4)
    assert f["revision_rate"] == pytest.approx(3 / 4)
    assert f["reviser_fixed"] == pytest.approx(1 / 2)  # two wrong attempts revised, one fixed
    assert f["final"] == pytest.approx(2 / 4)


def test_table_is_a_mean_over_seeds_per_run(tmp_path, capsys):
    for seed, acc in ((0, [True, True]), (1, [True, False])):
        d = tmp_path / "evals" / f"run_seed{seed}"
        d.mkdir(parents=True)
        (d / "predictions.jsonl").write_text(json.dumps(
            _code_answer(acc, [True, True], ["1", "1"], ["1", "1"])) + "\n")
    roles_seats.main([str(tmp_path)])
    row = [r for r in capsys.readouterr().out.splitlines() if r.startswith("| run |")][-1]
    # final: seeds 1.0 and 0.5 -> 0.75 ± 0.25 (s.e. = sample std / sqrt(2))
    assert "| run | 2 | 0.750 ± 0.250 |" in row


def test_a_study_without_predictions_is_a_one_line_error(tmp_path):
    with pytest.raises(SystemExit, match="no evals"):
        roles_seats.main([str(tmp_path)])
