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


def test_multiturn_transcripts_have_fixed_prompts_and_right_content():
    import random

    from satseq.data.multiturn import MIX, careful_verification, multiturn_examples, refine_prompt, transcript
    from satseq.rewards.extract import extract_answer
    from satseq.workflows.pag_prompts import parse_verdict

    ex = multiturn_examples(3000, seed=0, exclude={"347+589"})
    assert all(len(p) == 18 for p, _ in ex) and not any(p.endswith("347+589=") for p, _ in ex)
    # column by column: units 7+9 = 16 ends in 6, the attempt's units digit is 5 (hand-checked)
    assert careful_verification(347, 589, "935") == "7+9+0=16:5!,4+8+1=13:3=,3+5+1=09:9=,0:0=;no"
    assert careful_verification(347, 589, "0936") == "7+9+0=16:6=,4+8+1=13:3=,3+5+1=09:9=,0:0=;ok"
    assert careful_verification(999, 999, "1998").endswith(",1:1=;ok")  # the final carry is the thousands digit
    assert careful_verification(999, 999, "998").endswith(",1:0!;no")
    assert parse_verdict(careful_verification(347, 589, None), short_markers=True) == "wrong"
    assert parse_verdict(careful_verification(347, 589, "936"), short_markers=True) == "correct"
    rng = random.Random(0)
    for _ in range(300):
        a, b = rng.randint(100, 999), rng.randint(100, 999)
        for kind in MIX:
            prompt, completion = transcript(kind, a, b, rng)
            if kind == "verify" and not completion.startswith(("ok", "no")):  # careful checks are right
                shown = prompt[:4].lstrip("0")
                assert parse_verdict(completion, short_markers=True) == ("correct" if shown == str(a + b) else "wrong")
            if kind == "refine" and prompt[:4] == prompt[5:9] and "?" not in prompt[:4]:
                assert extract_answer(completion) == prompt[:4].lstrip("0")  # agreement is copied
    assert refine_prompt("347+589", "935", "936", with_hint=False) == "0935:____|347+589="


def test_multiturn_warm_start_builds_on_the_base_atomically(tmp_path):
    import json

    from satseq.envs.self_verify.warm_start import ensure_multiturn_warm_start, multiturn_warm_start_dir
    from satseq.models.warm_start import warm_start_dir
    from satseq.models.tiny import build_tiny_model, save_model_dir
    from satseq.models.sft import SFTConfig

    base = warm_start_dir(tmp_path)
    model, tok = build_tiny_model(seed=0)
    save_model_dir(model, tok, base)
    (base / "warm_start.json").write_text("{}")
    out = ensure_multiturn_warm_start(tmp_path, cfg=SFTConfig(steps=2, batch_size=4), n_examples=40,
                                      eval_size=10, show_progress=False, console=lambda *a: None)
    assert out == multiturn_warm_start_dir(tmp_path) and (out / "model.safetensors").exists()
    info = json.loads((out / "warm_start.json").read_text())
    assert info["base"] == str(base) and info["sft"]["steps"] == 2
    assert [p.name for p in out.parent.iterdir() if p.name.startswith(".")] == []
