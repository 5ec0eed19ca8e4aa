"""pass@k, avg@k, maj@k, the relay's majority vote and summaries (satseq.eval.metrics)."""
from __future__ import annotations

import itertools
import math

import pytest

from satseq.eval.metrics import (avg_at_k, maj_at_k, majority_vote, pass_at_k, problem_metrics, summarize,
                                 tie_generator, vote_of)


def brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    """Fraction of the k-subsets of n samples (the first c correct) holding a correct one."""
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(i < c for i in s) for s in subsets) / len(subsets)


def test_pass_at_k_matches_brute_force_for_all_small_cases():
    checked = 0
    for n in range(1, 9):
        for c in range(0, n + 1):
            for k in range(1, n + 1):
                expected = brute_force_pass_at_k(n, c, k)
                assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12), (n, c, k)
                assert expected == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k))
                checked += 1
    assert checked == sum(n * (n + 1) for n in range(1, 9))


def test_pass_at_k_edges():
    assert pass_at_k(10, 0, 5) == 0.0
    assert pass_at_k(10, 10, 1) == 1.0
    assert pass_at_k(10, 6, 5) == 1.0  # n - c < k
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(100, 3, 10) == pytest.approx(1 - math.comb(97, 10) / math.comb(100, 10))
    for n, c, k in [(4, 1, 5), (4, 1, 0), (4, 5, 1), (4, -1, 1), (0, 0, 1)]:
        with pytest.raises(ValueError):
            pass_at_k(n, c, k)


def test_avg_at_k():
    assert avg_at_k([1, 0, 1, 1], 2) == 0.5
    assert avg_at_k([1, 0, 1, 1]) == 0.75
    assert avg_at_k([True, False, False], 3) == pytest.approx(1 / 3)
    with pytest.raises(ValueError):
        avg_at_k([1, 0], 3)
    with pytest.raises(ValueError):
        avg_at_k([1, 0], 0)


def test_majority_vote_tie_breaks():
    # ties broken toward the later agent (SAT-Seq relay)
    assert majority_vote(["A", "B"]) == "B"
    assert majority_vote(["1", "2", "1", "2"]) == "2"
    assert majority_vote(["1", "2", "2", "1"]) == "1"
    assert majority_vote(["1", "2", "2", "1"], tie_break="first") == "1"
    assert majority_vote(["2", "1", "1", "2"], tie_break="first") == "2"
    assert majority_vote(["3", "1", "1"], tie_break="first") == "1"  # no tie: the majority wins
    # a strict majority is not overturned by position
    assert majority_vote(["7", "7", "8"]) == "7"


def test_majority_vote_groups_by_equivalence_not_strings():
    answers = ["0.5", "3", "\\frac{1}{2}"]
    assert majority_vote(answers) == "\\frac{1}{2}"  # group {0.5, 1/2}; latest member returned
    assert majority_vote(answers, tie_break="first") == "0.5"  # first member returned
    # with string equality the same answers tie three ways, and the later agent wins
    assert majority_vote(answers, equivalent=lambda a, b: a == b) == "\\frac{1}{2}"
    assert majority_vote(["0.5", "3", "3", "1/2"], equivalent=lambda a, b: a == b) == "3"
    assert majority_vote(["0.5", "3", "3", "1/2"]) == "1/2"  # 2-2 tie, later agent


def test_majority_vote_none_never_wins():
    assert majority_vote([None, None, "5"]) == "5"
    assert majority_vote([None, "5", None, None], tie_break="first") == "5"
    assert majority_vote([None, None]) is None
    assert majority_vote([]) is None
    with pytest.raises(ValueError):
        majority_vote(["1"], tie_break="middle")  # type: ignore[arg-type]


def test_maj_at_k_hand_cases():
    # equivalence grouping: {3}:1, {0.5, \frac12}:2 -> majority is 1/2
    assert maj_at_k(["3", "0.5", "\\frac12"], "1/2", 3) == 1.0
    # string grouping would be a 3-way tie won by the first answer "3"
    assert maj_at_k(["3", "0.5", "\\frac12"], "1/2", 3, equivalent=lambda a, b: a == b) == 0.0
    # an odd k's tie (three different answers) goes to the answer that appeared first
    assert maj_at_k(["3", "5", "4"], "3", 3) == 1.0
    assert maj_at_k(["5", "3", "4"], "3", 3) == 0.0
    # a strict majority at an even k needs no stream and ignores it
    assert maj_at_k(["0.5", "3", "1/2", "1/2"], "0.5", 4, tie_seed=(0, "p")) == 1.0
    # only the first k samples vote
    assert maj_at_k(["4", "4", "5", "5", "5"], "5", 2, tie_seed=(0, "p")) == 0.0
    assert maj_at_k(["4", "4", "5", "5", "5"], "5", 5) == 1.0
    assert maj_at_k([None, None, "5"], "5", 3) == 1.0
    assert maj_at_k([None, None, "5"], "5", 2, tie_seed=(0, "p")) == 0.0
    with pytest.raises(ValueError):
        maj_at_k(["1"], "1", 2, tie_seed=(0, "p"))
    # an even k's tie has no silent first-sample fallback: without the run's stream it refuses
    with pytest.raises(ValueError, match="seeded stream"):
        maj_at_k(["1/2", "3", "0.5", "3"], "0.5", 4)


def test_even_vote_ties_follow_the_seeded_stream():
    """A 1-1 tie at k=2 goes to either sample, about half the time each over problems, and the same way
    every time for one (seed, problem); another seed redraws it; a tie at an odd k still goes to the first."""
    problems = range(400)
    first = [maj_at_k(["1", "2"], "1", 2, tie_seed=(7, pid)) for pid in problems]
    assert 0.4 < sum(first) / len(first) < 0.6  # both ways over problems: 200 ± 10 expected
    assert first == [maj_at_k(["1", "2"], "1", 2, tie_seed=(7, pid)) for pid in problems]  # deterministic
    # the winner is one of the tied answers, and a mirror order swaps which one is "first"
    mirror = [maj_at_k(["2", "1"], "1", 2, tie_seed=(7, pid)) for pid in problems]
    assert first != mirror
    other_seed = [maj_at_k(["1", "2"], "1", 2, tie_seed=(8, pid)) for pid in problems]
    assert other_seed != first and 0.4 < sum(other_seed) / len(other_seed) < 0.6
    # ids of other types (the embedded tasks' are ints, datasets' strings) key the stream by their JSON
    assert vote_of(["a", "b"], 2, tie_seed=(0, {"i": 3})) == vote_of(["a", "b"], 2, tie_seed=(0, {"i": 3}))
    # three-way tie at k=4 (one None): each of the tied groups can win, never the non-vote
    wins = {vote_of(["1", "2", None, "3"], 4, tie_seed=(0, pid)) for pid in problems}
    assert wins == {"1", "2", "3"}
    # odd k unchanged: the first answer of a three-way tie, whatever the seed
    assert {vote_of(["1", "2", "3"], 3, tie_seed=(s, 0)) for s in range(20)} == {"1"}


def test_tie_generator_is_a_function_of_seed_problem_and_k():
    a = tie_generator(0, "p1", 2).integers(1 << 30, size=4)
    assert (a == tie_generator(0, "p1", 2).integers(1 << 30, size=4)).all()
    for other in (tie_generator(1, "p1", 2), tie_generator(0, "p2", 2), tie_generator(0, "p1", 4)):
        assert not (a == other.integers(1 << 30, size=4)).all()
    with pytest.raises(ValueError, match="generator"):
        majority_vote(["1", "2"], tie_break="seeded")


def test_problem_metrics():
    m = problem_metrics([1, 0, 0, 1], [1, 2], answers=["5", "4", "4", "5"], gold="5", tie_seed=(0, "q"))
    won = 1.0 if vote_of(["5", "4"], 2, tie_seed=(0, "q")) == "5" else 0.0  # a 1-1 tie: the stream's draw
    assert m == pytest.approx({"pass@1": 0.5, "avg@1": 1.0, "maj@1": 1.0,
                               "pass@2": 5 / 6, "avg@2": 0.5, "maj@2": won})


def test_summarize_hand_computed():
    per_problem = [
        {"correct": [1, 0, 0, 1], "answers": ["5", "4", "4", "5"], "gold": "5", "problem_id": 0},
        {"correct": [0, 0, 0, 0], "answers": ["1", None, "2", "1"], "gold": "3", "problem_id": 1},
    ]
    s = summarize(per_problem, [1, 2], seed=3)
    assert s["n_problems"] == 2 and s["n_samples"] == 8 and s["samples_per_problem"] == 4
    # pass@1: values 0.5, 0 -> mean 0.25; sample std = 0.5/sqrt(2); SE = std/sqrt(2) = 0.25
    assert s["pass@1"] == pytest.approx({"mean": 0.25, "se": 0.25})
    # pass@2: 1 - C(2,2)/C(4,2) = 5/6 and 0
    assert s["pass@2"]["mean"] == pytest.approx(5 / 12)
    assert s["pass@2"]["se"] == pytest.approx((5 / 6) / math.sqrt(2) / math.sqrt(2))
    assert s["avg@1"] == pytest.approx({"mean": 0.5, "se": 0.5})
    assert s["avg@2"]["mean"] == pytest.approx(0.25)
    assert s["maj@1"]["mean"] == pytest.approx(0.5)
    # problem 0: a 5/4 tie, drawn by seed 3's stream for problem 0; problem 1: wrong either way
    won = 1.0 if vote_of(["5", "4"], 2, tie_seed=(3, 0)) == "5" else 0.0
    assert s["maj@2"]["mean"] == pytest.approx(won / 2)
    with pytest.raises(ValueError, match="seeded stream"):
        summarize(per_problem, [2])  # an even k without the evaluation's seed
    with pytest.raises(ValueError, match="problem_id"):  # one stream for all problems would bias the ties again
        summarize([{k: v for k, v in p.items() if k != "problem_id"} for p in per_problem], [2], seed=3)


def test_summarize_without_answers_and_single_problem():
    s = summarize([{"correct": [1, 1, 0]}], [1, 3])
    assert "maj@1" not in s and s["pass@3"] == {"mean": 1.0, "se": None}
    assert s["pass@1"]["mean"] == pytest.approx(2 / 3)
    with pytest.raises(ValueError):
        summarize([{"correct": [1, 0]}], [3])
    with pytest.raises(ValueError):
        summarize([], [1])
    uneven = summarize([{"correct": [1]}, {"correct": [0, 1]}], [1])
    assert uneven["samples_per_problem"] is None and uneven["n_samples"] == 3
