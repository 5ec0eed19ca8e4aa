"""MLMT's embedded task (sum of three): solutions by hand, splits, warm-start transcripts by role,
and the wiring that gives MLMT (training and the coach evaluation) this task."""
import random
from pathlib import Path

import pytest

from satseq.data.sum_of_three import (MIX, SumOfThreeTask, mlmt_examples, single_pass_solution, transcript,
                                      two_stage_solution)
from satseq.rewards.extract import extract_answer


def test_solutions_by_hand():
    # 347 + 289 + 126 = 762; columns 7+9+6=22, 4+8+2+2=16, 3+2+1+1=07
    assert single_pass_solution(347, 289, 126) == "7+9+6+0=22,4+8+2+2=16,3+2+1+1=07;\\boxed{762}"
    # 347 + 289 = 636, then 636 + 126 = 762
    assert two_stage_solution(347, 289, 126) == "7+9+0=16,4+8+1=13,3+2+1=06;636|6+6+0=12,3+2+1=06,6+1+0=07;\\boxed{762}"
    assert extract_answer(two_stage_solution(499, 499, 999)) == "1997"
    assert extract_answer(single_pass_solution(499, 499, 999)) == "1997"


def test_problems_are_deterministic_disjoint_and_in_range():
    task = SumOfThreeTask(seed=0)
    held = task.problems(300, split="eval")
    assert [p.problem for p in held] == [p.problem for p in SumOfThreeTask(seed=0).problems(300, split="eval")]
    train = task.problems(500, split="train", exclude={p.problem for p in held})
    assert not {p.problem for p in held} & {p.problem for p in train}
    for p in train:
        a, b, c = (int(x) for x in p.problem.split("+"))
        assert 100 <= a <= 499 and 100 <= b <= 499 and 100 <= c <= 999 and a + b < 1000
        assert p.answer == str(a + b + c) and p.meta == {"a": a, "b": b, "c": c}


def test_transcripts_give_the_two_stage_method_to_the_coach_only():
    rng = random.Random(0)
    seen = {k: set() for k in MIX}
    for _ in range(600):
        kind = rng.choice(list(MIX))
        prompt, completion = transcript(kind, 347, 289, 126, rng)
        two_stage = "|" in completion
        if kind == "coach":
            assert prompt[5:9] == "tip?" and completion in (two_stage_solution(347, 289, 126), "\\boxed{762}")
            seen[kind].add("two" if two_stage else "hasty")
        elif kind in ("solve", "refine_blank"):
            assert not two_stage
            assert completion in (single_pass_solution(347, 289, 126), "\\boxed{762}")
            seen[kind].add("single" if "+0=" in completion[:8] else "hasty")
        elif kind == "refine":
            hint = prompt[5:9]
            assert not two_stage and prompt[4] == ":"
            ans = extract_answer(completion)
            if completion.startswith("tip:"):
                assert ans == hint.lstrip("0")
                seen[kind].add("hint")
            else:
                assert completion in (single_pass_solution(347, 289, 126), "\\boxed{762}")
                seen[kind].add("solve")
        if kind == "solve_two_operands":  # the base skill, on another two-operand problem
            assert len(prompt) == len("____|____|347+589=") and extract_answer(completion) == str(eval(prompt[10:-1]))
            continue
        assert len(prompt) == len("____|____|347+289+126=")
    assert seen["coach"] == {"two", "hasty"} and seen["solve"] == {"single", "hasty"}
    assert seen["refine"] == {"hint", "solve"}
    with pytest.raises(ValueError, match="unknown transcript kind"):
        transcript("verify", 1, 2, 3, rng)


def test_warm_start_corpus_never_shows_held_out_problems():
    held = {p.problem for p in SumOfThreeTask(seed=0).problems(200, split="eval")}
    for prompt, _ in mlmt_examples(3000, exclude=held):
        problem = prompt.split("|")[-1].rstrip("=")
        assert problem not in held


def test_mlmt_and_the_coach_workflow_use_the_sum_of_three():
    from satseq.data.arithmetic import ArithmeticTask
    from satseq.eval.runner import _load_dataset
    from satseq.eval.targets import env_of
    from satseq.registry import get_env, get_method
    from satseq.models.warm_start import eval_exclusion

    assert get_method("mlmt").env == "coach"
    assert isinstance(get_env("coach").embedded_task(), SumOfThreeTask)
    assert isinstance(env_of(None, "coach").embedded_task(), SumOfThreeTask)
    assert isinstance(get_env("self_verify").embedded_task(), ArithmeticTask)
    assert isinstance(env_of(None, None).embedded_task(), ArithmeticTask)
    assert all(p.count("+") == 2 for p in eval_exclusion(SumOfThreeTask(0), 20))
    problems, ident = _load_dataset("embedded", data_dir=None, limit=5, env=env_of(None, "coach"))
    assert ident == "embedded-sum3:eval:seed0" and all(p.problem.count("+") == 2 for p in problems)
    problems, ident = _load_dataset("embedded", data_dir=None, limit=5, env=env_of(None, None))
    assert ident == "embedded:eval:seed0" and all(p.problem.count("+") == 1 for p in problems)


def test_training_datasets_follow_the_method():
    from satseq.config import load_config
    from satseq.registry import get_method
    from satseq.runtime import load_datasets

    def load_datasets_of(cfg):
        return load_datasets(cfg, get_method(cfg.method).environment(cfg))

    train, held = load_datasets_of(load_config(None, ["method=mlmt", "data.train_size=20", "data.eval_size=10"]))
    assert all(p.problem.count("+") == 2 for p in train + held)
    assert not {p.problem for p in train} & {p.problem for p in SumOfThreeTask(0).problems(1000, split="eval")}
    train, _ = load_datasets_of(load_config(None, ["method=grpo", "data.train_size=5", "data.eval_size=5"]))
    assert all(p.problem.count("+") == 1 for p in train)


def test_mlmt_warm_start_builds_on_the_base_atomically(tmp_path):
    import json

    from satseq.eval.targets import env_of
    from satseq.envs.coach.warm_start import ensure_mlmt_warm_start, mlmt_warm_start_dir
    from satseq.models.warm_start import warm_start_dir
    from satseq.models.tiny import build_tiny_model, save_model_dir
    from satseq.models.sft import SFTConfig

    base = warm_start_dir(tmp_path)
    model, tok = build_tiny_model(seed=0)
    save_model_dir(model, tok, base)
    (base / "warm_start.json").write_text("{}")
    out = ensure_mlmt_warm_start(tmp_path, cfg=SFTConfig(steps=2, batch_size=4), n_examples=40, eval_size=10,
                                 show_progress=False, console=lambda *a: None)
    assert out == mlmt_warm_start_dir(tmp_path) and (out / "model.safetensors").exists()
    info = json.loads((out / "warm_start.json").read_text())
    assert info["base"] == str(base) and info["sft"]["steps"] == 2 and info["task"] == "sum-of-three MLMT"
    assert [p.name for p in out.parent.iterdir() if p.name.startswith(".")] == []
    assert env_of(None, "coach").ensure_warm_start(tmp_path) == out  # built once, then found


def test_mlmt_generates_room_for_a_two_stage_demonstration_unless_told_otherwise():
    from satseq.config import load_config

    assert len(two_stage_solution(499, 499, 999)) + 1 <= load_config(None, ["method=mlmt"]).rollout.max_new_tokens
    assert load_config(None, ["method=mlmt", "rollout.max_new_tokens=10"]).rollout.max_new_tokens == 10
    assert load_config(None, ["method=pag"]).rollout.max_new_tokens == 48


def test_behaviour_names_each_transcript_kind_of_the_warm_start():
    from satseq.data.sum_of_three import USE_HINT, behaviour, single_pass_solution, two_stage_solution

    assert behaviour(single_pass_solution(347, 289, 126)) == "single"
    assert behaviour(two_stage_solution(347, 289, 126)) == "two_stage"
    assert behaviour(USE_HINT + "\\boxed{762}") == "copy"
    assert behaviour("\\boxed{762}") == "hasty"


@pytest.mark.parametrize("name,alias", [("coach", "mlmt"), ("self_verify", "pag")])
def test_an_environments_task_in_another_environment(tmp_path, name, alias):
    """``data.embedded_task=coach`` / ``self_verify`` (older names ``mlmt`` / ``pag``): GRPO in env single
    trains on that environment's problems, from its warm start, with its generation length (GRPO on the
    solver / the first attempt at equal samples, issue 38)."""
    from satseq.config import load_config
    from satseq.data.arithmetic import ArithmeticTask
    from satseq.envs.tasks import warm_start_for
    from satseq.eval.runner import _load_dataset
    from satseq.registry import get_env
    from satseq.runtime import load_datasets

    single = get_env("single")
    for task in (name, alias):
        cfg = load_config(None, ["method=grpo", f"data.embedded_task={task}", "data.train_size=20",
                                 "data.eval_size=10"])
        train, held = load_datasets(cfg, single)
        problems, ident = _load_dataset("embedded", data_dir=None, limit=5, env=single, embedded_task=task)
        if name == "coach":
            assert all(p.problem.count("+") == 2 for p in train + held) and cfg.rollout.max_new_tokens == 96
            assert ident == "embedded-sum3:eval:seed0"
        else:
            assert all(p.problem.count("+") == 1 for p in train + held) and cfg.rollout.max_new_tokens == 48
            assert isinstance(get_env(name).embedded_task(), ArithmeticTask)
    # the warm start is the owner's: its directory, built (or found) by its builder
    made = []
    owner = get_env(name)
    original = type(owner).ensure_warm_start
    try:
        type(owner).ensure_warm_start = lambda self, out, **kw: made.append(out) or Path(out) / "embedded" / "x"
        assert warm_start_for(alias, single, tmp_path) == tmp_path / "embedded" / "x"
        assert warm_start_for(name, single, tmp_path) == tmp_path / "embedded" / "x"
    finally:
        type(owner).ensure_warm_start = original
    assert made == [tmp_path, tmp_path]
    with pytest.raises(Exception, match="embedded_task"):
        load_config(None, ["method=grpo", "data.embedded_task=sat_seq"])


def test_every_caller_resolves_the_embedded_task_through_its_owner():
    """A run's warm start and problems under ``data.embedded_task`` come from ``satseq.envs.tasks``
    alone: a caller that asked ``embedded_tasks`` directly would miss ``pag`` / ``mlmt`` (as satseq
    compare's warm-start row once did: KeyError 'pag')."""
    import ast

    root = Path(__file__).resolve().parents[1] / "satseq"
    direct = []
    for path in root.rglob("*.py"):
        if path.name in ("embedded_tasks.py", "tasks.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "satseq.models.embedded_tasks":
                direct += [f"{path.relative_to(root)}: {a.name}" for a in node.names
                           if a.name in ("ensure_embedded_warm_start", "embedded_task")]
    assert not direct, direct
