"""The embedded default: the character tokenizer, the tiny model dir, and the arithmetic task."""
import random

from transformers import PreTrainedTokenizerFast

from satseq.data.arithmetic import ArithmeticTask, careful_solution, near_miss, render_prompt
from satseq.models.loading import load_causal_lm
from satseq.models.tiny import build_tiny_model, save_model_dir
from satseq.rewards.extract import extract_answer


def test_careful_solution_is_right_for_many_sums():
    rng = random.Random(0)
    for _ in range(2000):
        a, b = rng.randint(100, 999), rng.randint(100, 999)
        sol = careful_solution(a, b)
        assert extract_answer(sol) == str(a + b)
        assert sol.count(",") == 2 and len(sol) <= 42
    assert careful_solution(999, 999) == "9+9+0=18,9+9+1=19,9+9+1=19;\\boxed{1998}"


def test_prompts_have_fixed_length_and_splits_are_disjoint():
    assert len({len(render_prompt("347+589", prev)) for prev in ([], ["936"], ["936", "12345"])}) == 1
    assert render_prompt("347+589", ["936", "abc"]) == "0936|????|347+589="
    task = ArithmeticTask(seed=0)
    ev = task.problems(300, split="eval")
    tr = task.problems(2000, split="train", exclude={p.problem for p in ev})
    assert len({p.problem for p in ev} & {p.problem for p in tr}) == 0
    assert all(int(p.answer) == p.meta["a"] + p.meta["b"] for p in ev)
    assert task.problems(5, split="eval") == ev[:5]  # deterministic


def test_sft_mix_has_both_styles_and_excludes_held_out():
    task = ArithmeticTask(seed=0)
    held = {p.problem for p in task.problems(200, split="eval")}
    ex = task.sft_examples(2000, exclude=held)
    careful = sum(not c.startswith("\\boxed") for _, c in ex) / len(ex)
    assert 0.45 < careful < 0.55
    assert not any(p.split("|")[-1][:-1] in held for p, _ in ex)
    assert near_miss(500, random.Random(1)) != 500


def test_tiny_model_dir_round_trip(tmp_path):
    model, tok = build_tiny_model(seed=0)
    assert 1_500_000 < sum(p.numel() for p in model.parameters()) < 3_000_000
    save_model_dir(model, tok, tmp_path / "m")
    m2, t2 = load_causal_lm(tmp_path / "m")
    assert isinstance(t2, PreTrainedTokenizerFast)
    text = "0936|____|347+589=\\boxed{936}"
    assert t2(text, add_special_tokens=False)["input_ids"] == tok(text, add_special_tokens=False)["input_ids"]
    assert len(t2(text, add_special_tokens=False)["input_ids"]) == len(text)  # one token per character
    assert m2.config.satseq_prompt_format == "embedded"
