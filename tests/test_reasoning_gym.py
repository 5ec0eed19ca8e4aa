"""reasoning-gym as a training source, a held-out set and a scorer (satseq/data/reasoning_gym.py,
satseq/rewards/scorers.py): the same problems for a seed and other ones for the two splits, each
generator's own scorer grading right, partial and wrong answers, the score as the reward, GRPO
training on a generator and ``satseq eval`` reporting on one, and one-line errors for bad specs."""
from __future__ import annotations

import json
import pickle

import pytest

pytest.importorskip("reasoning_gym")

import reasoning_gym  # noqa: E402

from satseq.data.loading import load_problems  # noqa: E402
from satseq.data.reasoning_gym import TRAIN_SEED_OFFSET, parse_spec  # noqa: E402
from satseq.errors import ConfigError, DataError, SatseqError  # noqa: E402
from satseq.records import Episode, Problem, Turn  # noqa: E402
from satseq.rewards.extract import extract_answer  # noqa: E402
from satseq.rewards.plain_text import plain_text_answer  # noqa: E402
from satseq.rewards.scorers import grade  # noqa: E402

CHAIN = "reasoning_gym:chain_sum?min_terms=3&max_terms=4"


def _questions(problems):
    return [p.problem for p in problems]


# ------------------------------------------------------------------------------------ the source
def test_a_seed_gives_the_same_problems_and_the_splits_differ():
    train = load_problems(CHAIN, split="train", limit=40)
    again = load_problems(CHAIN, split="train", limit=40)
    held = load_problems(CHAIN, split="test", limit=40)
    assert [(p.problem_id, p.problem, p.answer) for p in train] == [(p.problem_id, p.problem, p.answer) for p in again]
    assert not set(_questions(train)) & set(_questions(held))
    assert all(3 <= p.meta["reasoning_gym"]["entry"]["metadata"]["num_terms"] <= 4 for p in train + held)
    other = load_problems(CHAIN + "&seed=5", split="test", limit=40)
    assert _questions(other) != _questions(held)
    # a smaller set is the start of a larger one (the index is the item's coordinate)
    assert _questions(load_problems(CHAIN, split="test", limit=10)) == _questions(held)[:10]


def test_the_held_out_split_is_reasoning_gyms_own_dataset_and_train_is_offset():
    held = load_problems(CHAIN + "&seed=7", split="test", limit=12)
    ds = reasoning_gym.create_dataset("chain_sum", seed=7, size=12, min_terms=3, max_terms=4)
    assert [(p.problem, p.answer) for p in held] == [(ds[i]["question"], ds[i]["answer"]) for i in range(12)]
    train = load_problems(CHAIN + "&seed=7", split="train", limit=3)
    assert train[0].meta["reasoning_gym"]["seed"] == 7 + TRAIN_SEED_OFFSET
    assert train[0].problem_id == f"chain_sum-{7 + TRAIN_SEED_OFFSET}-0"


def test_train_skips_the_held_out_pool_on_a_small_problem_space():
    """Two one-digit terms: a few hundred distinct problems, which other seeds repeat; the training
    split still holds none of the first ``held_out`` held-out questions."""
    small = "reasoning_gym:chain_sum?min_terms=2&max_terms=2&min_digits=1&max_digits=1&held_out=60"
    held = set(_questions(load_problems(small, split="test", limit=60)))
    train = load_problems(small, split="train", limit=40)
    assert len(train) == 40 and not held & set(_questions(train))
    naive = reasoning_gym.create_dataset("chain_sum", seed=TRAIN_SEED_OFFSET, size=200, min_terms=2, max_terms=2,
                                         min_digits=1, max_digits=1)
    assert held & {naive[i]["question"] for i in range(200)}  # without the exclusion they would share some
    with pytest.raises(DataError, match="too few distinct problems"):  # the pool covers the whole space
        load_problems(small.replace("held_out=60", "held_out=3000"), split="train", limit=500)


def test_problems_pickle_and_score_after_the_trip():
    p = load_problems("reasoning_gym:word_sorting", split="test", limit=1)[0]
    q = pickle.loads(pickle.dumps(p))
    assert q == p and grade(p.answer, q) == (True, 1.0)


# ------------------------------------------------------------------------------------ the scorer
def _boxed(answer: str) -> str:
    return f"Let me work it out.\nThe final answer is \\boxed{{{answer}}}"


def _right_and_wrong(name: str, p: Problem) -> tuple[str, str]:
    """A response with the right answer written the way the task asks, and one with a wrong answer."""
    entry = p.meta["reasoning_gym"]["entry"]
    if name == "number_sorting":
        nums = entry["metadata"]["sorted_numbers"]
        return _boxed(str(nums)), _boxed(str(list(reversed(nums))))
    if name == "spell_backward":
        return _boxed(f"\\text{{{p.answer}}}"), _boxed(f"\\text{{{entry['metadata']['word']}x}}")
    if name == "word_sorting":
        return _boxed(p.answer), _boxed("zzz, yyy")
    return _boxed(p.answer), _boxed(str(int(p.answer) + 1))


@pytest.mark.parametrize("name", ["chain_sum", "basic_arithmetic", "letter_counting", "number_sorting",
                                  "word_sorting", "count_bits", "spell_backward"])
def test_each_generators_scorer_grades_right_and_wrong_answers(name):
    for p in load_problems(f"reasoning_gym:{name}", split="test", limit=4):
        right, wrong = _right_and_wrong(name, p)
        assert grade(extract_answer(right), p) == (True, 1.0), (name, right, p.answer)
        ok, score = grade(extract_answer(wrong), p)
        assert not ok and score < 1.0, (name, wrong, p.answer)
        assert grade(None, p) == (False, 0.0)
        assert grade(extract_answer("no box, no phrase"), p) == (False, 0.0)


def test_plain_text_answer_drops_only_the_latex_around_the_whole_answer():
    assert plain_text_answer(" \\text{ainomma} ") == "ainomma"
    assert plain_text_answer("$\\textbf{a, b}$") == "a, b"
    assert plain_text_answer("\\(5\\)") == "5"
    assert plain_text_answer("$5$ and $6$") == "$5$ and $6$"
    assert plain_text_answer("a \\text{b}") == "a \\text{b}"
    assert plain_text_answer("\\text{a} + \\text{b}") == "\\text{a} + \\text{b}"


def _episode(p: Problem, answers: list) -> list[Episode]:
    eps = []
    for g, a in enumerate(answers):
        t = Turn(role="policy", index=0, prompt_text="", prompt_ids=[], response_ids=[], behaviour_logprobs=[],
                 text="", finish_reason="stop", answer=a)
        eps.append(Episode(problem=p, group=0, turns=[t], prediction=a))
    return eps


def test_the_reward_is_the_score_and_correct_means_a_score_of_one():
    from satseq.rewards.turn_rewards import assign_outcome_rewards, assign_relay_rewards

    p = load_problems("reasoning_gym:word_sorting?min_words=4&max_words=4", split="test", limit=1)[0]
    words = p.meta["reasoning_gym"]["entry"]["metadata"]["sorted_words"]
    partial = ", ".join(reversed(words))  # the right words in the wrong order: word_sorting gives partial credit
    expected = p.meta["reasoning_gym"]["entry"]
    ds = reasoning_gym.create_dataset("word_sorting", seed=0, size=1, min_words=4, max_words=4)
    want = ds.score_answer(partial, expected)
    assert 0.0 < want < 1.0
    eps = _episode(p, [p.answer, partial, "nonsense", None])
    assign_outcome_rewards(eps)
    assert [ep.turns[0].reward for ep in eps] == [1.0, want, 0.0, 0.0]
    assert [ep.turns[0].correct for ep in eps] == [True, False, False, False]
    assert [ep.turns[0].info["score"] for ep in eps] == [1.0, want, 0.0, 0.0]
    eps = _episode(p, [partial])
    assign_relay_rewards(eps, own=2.0, team=1.0)  # own credit scales the score; the vote's is correctness
    assert eps[0].turns[0].reward == 2.0 * want


def test_math_problems_are_graded_as_before():
    from satseq.rewards.grade import is_equivalent
    from satseq.rewards.turn_rewards import assign_outcome_rewards

    p = Problem(problem_id=0, problem="1/2 + 1/2 = ?", answer="1")
    answers = ["1", "\\frac{2}{2}", "1.0", "2", None]
    eps = _episode(p, answers)
    assign_outcome_rewards(eps)
    assert [ep.turns[0].reward for ep in eps] == [float(a is not None and is_equivalent(a, "1")) for a in answers]
    assert [ep.turns[0].reward for ep in eps] == [1.0, 1.0, 1.0, 0.0, 0.0]
    assert all("score" not in ep.turns[0].info for ep in eps)  # the math scorer leaves the turn as it was


def test_the_vote_of_a_named_scorer_groups_plain_answers_and_judges_by_its_verdicts():
    from satseq.eval.metrics import problem_metrics

    # math: equivalent against the reference (gold "x"), as before
    assert problem_metrics([1, 0, 0], [3], ["1", "2", "2"], "1")["maj@3"] == 0.0
    # a named scorer: "b, a" and " b,  a " are one vote; the winner's verdict is its sample's
    answers = ["b, a", " b,  a ", "a, b"]
    m = problem_metrics([0.0, 0.0, 1.0], [3], answers, "a, b", scorer="reasoning_gym")
    assert m["maj@3"] == 0.0
    m = problem_metrics([1.0, 1.0, 0.0], [3], answers, "unused", scorer="reasoning_gym")
    assert m["maj@3"] == 1.0


# ------------------------------------------------------------------------------------ errors
@pytest.mark.parametrize("override, words", [
    ("data.train=reasoning_gym:chain_summ", ["data.train", "chain_summ", "did you mean chain_sum"]),
    ("data.eval=reasoning_gym:chain_sum?min_term=3", ["data.eval", "no setting 'min_term'", "min_terms"]),
    ("data.train=reasoning_gym:chain_sum?min_terms=x", ["data.train", "min_terms", "integer"]),
    ("data.train=reasoning_gym:chain_sum?min_terms=9&max_terms=2", ["data.train", "max_terms must be >= min_terms"]),
    ("data.train=reasoning_gym:chain_sum?size=3", ["data.train", "data.train_size"]),
    ("data.train=reasoning_gym:chain_sum?seed=-1", ["data.train", "seed"]),
    ("data.train=reasoning_gym:?min_terms=3", ["data.train", "unknown reasoning-gym generator"]),
])
def test_bad_names_and_settings_are_one_line_config_errors(override, words):
    from satseq.api import load

    with pytest.raises(ConfigError) as e:
        load(None, [override])
    msg = str(e.value)
    assert "\n" not in msg and len(msg) <= SatseqError.MAX_LENGTH
    for w in words:
        assert w in msg, msg


def test_the_unknown_name_error_points_to_the_listing_and_eval_names_the_spec():
    with pytest.raises(ConfigError, match=r"^reasoning_gym:nope: unknown .*python -m satseq\.data\.reasoning_gym"):
        load_problems("reasoning_gym:nope", split="test", limit=2)
    assert parse_spec("reasoning_gym:chain_sum?max_terms=4&min_terms=3").text() == CHAIN.replace(
        "min_terms=3&max_terms=4", "max_terms=4&min_terms=3")


def test_a_file_row_naming_an_unknown_scorer_is_refused(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text(json.dumps({"problem": "1+1", "answer": "2", "scorer": "nope"}) + "\n")
    with pytest.raises(DataError, match=r"d\.jsonl:1: unknown scorer 'nope'"):
        load_problems(f)


# ------------------------------------------------------------------------------------ a run and eval
FAST = ["trainer.train_batch_size=2", "grpo.group_size=2", "rollout.max_new_tokens=6", "data.train_size=8",
        "data.eval_size=4", "threads=1", "trainer.tensorboard=false", "trainer.progress=false",
        "trainer.num_stages=2", "trainer.eval_every=2", "ppo.lr=1e-3"]


def test_grpo_trains_on_a_generator_with_its_scorer_as_the_reward_and_eval_reports(tiny_dir, tmp_path, monkeypatch):
    """Every training and held-out answer goes through reasoning-gym's scorer (a spy that wraps it and
    adds 0.5): the stage's mean reward is that score, accuracy counts only a score of 1; then
    ``satseq eval --dataset reasoning_gym:...`` writes its metrics."""
    import satseq
    import satseq.data.reasoning_gym as rg
    from typer.testing import CliRunner

    from satseq.cli import app

    real, seen = rg.score_answer, []

    def spy(answer, problem):
        seen.append(problem.problem_id)
        return min(1.0, real(answer, problem) + 0.5)

    monkeypatch.setattr(rg, "score_answer", spy)
    r = satseq.train(None, [f"model.path={tiny_dir}", "method=grpo", *FAST, "data.train=reasoning_gym:chain_sum",
                            "data.eval=reasoning_gym:chain_sum", f"output_dir={tmp_path}", "run_name=r"])
    assert len(r.metrics) == 2 and any(k.endswith("/loss") for k in r.final)
    assert all(row["rollout/episode_reward"] == 0.5 and row["policy/accuracy"] == 0.0 for row in r.metrics)
    train_ids = {p.problem_id for p in load_problems("reasoning_gym:chain_sum", split="train", limit=8)}
    held_ids = {p.problem_id for p in load_problems("reasoning_gym:chain_sum", split="test", limit=4)}
    assert train_ids & set(seen) and held_ids & set(seen)  # rollouts and the held-out evaluation
    monkeypatch.setattr(rg, "score_answer", real)

    out = tmp_path / "ev"
    res = CliRunner().invoke(app, ["eval", "--checkpoint_dir", str(r.run_dir), "--dataset", CHAIN, "--limit", "3",
                                   "--output_dir", str(out), "--max_new_tokens", "6", "--threads", "1"])
    assert res.exit_code == 0, res.output[-2000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["n_problems"] == 3 and "accuracy" in metrics
    rows = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    assert [row["problem_id"] for row in rows] == [f"chain_sum-0-{i}" for i in range(3)]
    assert all(row["scorer"] == "reasoning_gym" for row in rows)
    bad = CliRunner().invoke(app, ["eval", "--checkpoint_dir", str(r.run_dir), "--dataset", "reasoning_gym:nope",
                                   "--limit", "3", "--output_dir", str(tmp_path / "ev2")])
    assert bad.exit_code != 0 and "reasoning_gym:nope: unknown reasoning-gym generator" in bad.output
