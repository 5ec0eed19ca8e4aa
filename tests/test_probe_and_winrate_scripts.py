"""bench/methods/reasoning_gym_probe.py's cell metrics (tool calls that ran, calls past the budget not counted as
run, programs that printed the right answer) and bench/methods/textarena_winrate.py's trivial baseline (a random
player against the random opponent: every game finishes, the rates add up to 1, the same seeds give the same games)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / "methods" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _episode(correct, results, output_correct=False, prediction="1", stop="answered"):
    return {"correct": correct, "results": results, "calls": [{"name": "python"}] * len(results),
            "prediction": prediction, "stop": stop, "tokens": 10, "output_correct": output_correct}


def test_probe_counts_the_calls_that_ran_among_those_run():
    from satseq.envs.tool_use.session import BUDGET_SPENT

    probe = _script("reasoning_gym_probe")
    eps = [_episode(True, ["-56"], output_correct=True),
           _episode(False, ["-103", BUDGET_SPENT], output_correct=True, prediction=None, stop="turn_limit"),
           _episode(False, ["Traceback ...\nerror: exit status 1"]),
           _episode(False, [])]
    m = probe.summarize(eps, "tool_instructed")
    assert m["accuracy"] == 0.25 and m["n"] == 4
    assert m["called"] == 0.75 and m["calls"] == 4 and m["calls_executed"] == 3
    assert m["calls_ran"] == pytest.approx(2 / 3)       # the budget-spent answer is not a run
    assert m["output_correct"] == 0.5 and m["answered"] == 0.75 and m["answer_found"] == 0.75
    assert "called" not in probe.summarize(eps, "one_pass")


def test_probe_cells_are_run_as_a_run_would_run_them():
    from satseq.config import load_config

    probe = _script("reasoning_gym_probe")

    class Args:
        problems, max_new_tokens, max_turns, max_tool_calls, threads, out = 5, 32, 2, 1, 1, Path("/tmp/x")

    spec = "reasoning_gym:chain_sum?min_terms=2&max_terms=2&held_out=0"
    tool = load_config(None, probe.config_overrides(spec, "tool_instructed", 1.0, Args))
    assert tool.env.name == "tool_use" and tool.data.prompt_template == probe.INSTRUCTED_TEMPLATE
    assert tool.env.tool_use.max_tool_calls == 1 and tool.rollout.temperature == 1.0
    one = load_config(None, probe.config_overrides(spec, "one_pass", 0.0, Args))
    assert one.env.name == "single" and one.data.prompt_template == "boxed"


def test_a_random_player_against_the_random_opponent():
    pytest.importorskip("textarena")
    winrate = _script("textarena_winrate")
    a = winrate.random_player("TicTacToe-v0", "random", "alternate", 40)["player"]
    assert a["games"] == 40 and a["unfinished"] == 0
    assert a["win"] + a["draw"] + a["loss"] == pytest.approx(1)
    assert winrate.random_player("TicTacToe-v0", "random", "alternate", 40)["player"] == a
    first = winrate.random_player("TicTacToe-v0", "random", "0", 40)["player"]
    assert first["win"] > first["loss"]  # the first player's advantage
