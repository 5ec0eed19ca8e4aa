"""Method warm starts trained to a validation target: each task's probes, the probe grader, the
stopping rule (the weakest behaviour), and the one-line failure at the cap."""
import json

import pytest

from satseq.records import Probe


def _chain_reference(probe, problem):
    from satseq.data.relay_chain import COPY, stage1_solution, stage2_solution

    a, b, c = problem.meta["a"], problem.meta["b"], problem.meta["c"]
    if probe.kind == "stage1":
        return stage1_solution(a, b)
    if probe.kind == "stage2":
        return stage2_solution(a + b, c)
    shown = probe.prompt.split("|")[1].lstrip("0")
    return COPY + f"\\boxed{{{shown}}}"


def test_chain_probes_are_answered_by_the_corpus_behaviours():
    from satseq.data.relay_chain import ChainTask, chain_probes
    from satseq.models.warm_start import probe_answer

    problems = ChainTask(seed=0).problems(20, split="valid")
    probes = chain_probes(problems, seed=0)
    assert [p.kind for p in probes[:3]] == ["stage1", "stage2", "copy"] and len(probes) == 60
    for i, pr in enumerate(probes):
        ref = _chain_reference(pr, problems[i // 3])
        assert ref.startswith(pr.head) and probe_answer(ref) == pr.answer
    a, b, c = (problems[0].meta[k] for k in "abc")
    assert probes[0].answer == str(a + b) and probes[1].answer == str(a + b + c)
    assert probes[1].prompt.startswith(f"{a + b:04d}|____|")
    assert sum(p.answer != str(sum(q.meta.values())) for p, q in zip(probes[2::3], problems)) > 0  # near misses copied
    assert chain_probes(problems, seed=0) == probes  # seeded


def test_mlmt_and_pag_probes_are_answered_by_the_corpus_behaviours():
    from satseq.data.arithmetic import ArithmeticTask, careful_solution
    from satseq.data.multiturn import careful_verification, pag_probes
    from satseq.data.sum_of_three import (USE_HINT, SumOfThreeTask, mlmt_probes, single_pass_solution,
                                          two_stage_solution)
    from satseq.models.warm_start import probe_answer

    problems = SumOfThreeTask(seed=0).problems(10, split="valid")
    probes = mlmt_probes(problems)
    assert [p.kind for p in probes[:4]] == ["coach_two_stage", "refine_copy", "solver_single", "refine_single"]
    for i, pr in enumerate(probes):
        a, b, c = (problems[i // 4].meta[k] for k in "abc")
        ref = {"coach_two_stage": two_stage_solution(a, b, c), "refine_copy": USE_HINT + f"\\boxed{{{pr.answer}}}",
               "solver_single": single_pass_solution(a, b, c), "refine_single": single_pass_solution(a, b, c)}[pr.kind]
        assert ref.startswith(pr.head) and probe_answer(ref) == pr.answer
        if pr.kind.endswith("single"):
            assert pr.answer == str(a + b + c) and not pr.head.startswith("\\")  # a digit: the chain, not hasty
    problems = ArithmeticTask(seed=0).problems(30, split="valid")
    probes = pag_probes(problems)
    verdicts = [p.answer for p in probes if p.kind == "careful_verify"]
    assert set(verdicts) == {"ok", "no"}
    for i, pr in enumerate(probes):
        a, b = problems[i // 2].meta["a"], problems[i // 2].meta["b"]
        shown = pr.prompt.split("|")[0].lstrip("0")
        ref = careful_verification(a, b, shown) if pr.kind == "careful_verify" else careful_solution(a, b)
        assert ref.startswith(pr.head) and probe_answer(ref) == pr.answer


def test_probe_scores_force_the_head_and_grade_each_behaviour(tiny):
    from conftest import ScriptedEngine
    from satseq.models.warm_start import probe_scores

    probes = [Probe("x", "1+1=", "a", "2"), Probe("x", "2+2=", "a", "4"), Probe("y", "3|", "b", "ok")]
    answers = {"1+1=a": ";\\boxed{2}", "2+2=a": ";\\boxed{5}", "3|b": "7!=8;ok"}

    def script(prompt):
        assert prompt in answers  # the prompt plus its forced head, nothing sampled before it
        return answers[prompt]

    assert probe_scores(None, tiny[1], probes, engine=ScriptedEngine(tiny[1], script)) == {"x": 0.5, "y": 1.0}


def _fake_base(tmp_path):
    from satseq.models.tiny import build_tiny_model, save_model_dir
    from satseq.models.warm_start import warm_start_dir

    base = warm_start_dir(tmp_path)
    model, tok = build_tiny_model(seed=0)
    save_model_dir(model, tok, base)
    (base / "warm_start.json").write_text("{}")


def _recipe(scores, target=0.9):
    from satseq.models.warm_start import WarmStartRecipe

    return WarmStartRecipe(probes=lambda problems, seed=0: [Probe("stage1", p.problem, "", "") for p in problems],
                           target=target, check_every=2, cooldown_steps=3, max_steps=12)


def _build(tmp_path, monkeypatch, scores, **kw):
    import satseq.models.warm_start as ws
    from satseq.data.relay_chain import ChainTask, chain_examples
    from satseq.models.sft import SFTConfig

    it = iter(scores)
    monkeypatch.setattr(ws, "probe_scores", lambda *a, **k: next(it))
    recipe = _recipe(scores)
    cfg = SFTConfig(**{**recipe.sft_config(0).__dict__, "batch_size": 4})
    lines = []
    out = ws.ensure_method_warm_start(tmp_path, stem="chain", task=ChainTask(seed=0), examples=chain_examples,
                                      recipe=recipe, what="chain", info={"task": "t"}, cfg=cfg, n_examples=40,
                                      eval_size=10, show_progress=False, console=lines.append)
    return out, lines


def test_method_warm_start_stops_when_its_weakest_behaviour_reaches_the_target(tmp_path, monkeypatch):
    _fake_base(tmp_path)
    scores = [{"stage1": 0.95, "stage2": 0.2}, {"stage1": 0.91, "stage2": 0.92}, {"stage1": 0.99, "stage2": 0.97}]
    out, lines = _build(tmp_path, monkeypatch, scores)
    info = json.loads((out / "warm_start.json").read_text())
    # checks at steps 2 (weakest 0.2) and 4 (weakest 0.91 ≥ 0.9) → cool-down 3 steps → 7 steps, final check
    assert [c["step"] for c in info["checks"]] == [2, 4, 7] and info["steps"] == 7 and info["reached_target"]
    assert info["checks"][0]["score"] == 0.2 and info["checks"][-1]["behaviours"] == scores[-1]
    assert any("validation check 1: stage1 0.95, stage2 0.20" in ln for ln in lines)


def test_method_warm_start_that_misses_its_target_fails_in_one_line_and_writes_nothing(tmp_path, monkeypatch):
    from satseq.errors import SatseqError

    _fake_base(tmp_path)
    with pytest.raises(SatseqError, match=r"did not reach its validation target 0.9 in 12 SFT steps.*stage2") as e:
        _build(tmp_path, monkeypatch, [{"stage1": 1.0, "stage2": 0.5}] * 10)
    assert "\n" not in str(e.value)
    assert sorted(p.name for p in (tmp_path / "embedded").iterdir()) == ["warm_start_seed0"]


def test_every_embedded_warm_start_has_a_target_recipe():
    from satseq.envs.coach.warm_start import MLMT_RECIPE
    from satseq.envs.self_verify.warm_start import MULTITURN_RECIPE
    from satseq.models.embedded_tasks import CHAIN_RECIPE, EMBEDDED_TASKS

    assert set(EMBEDDED_TASKS) == {"chain"}  # a new named task needs a recipe here too
    for r in (CHAIN_RECIPE, MLMT_RECIPE, MULTITURN_RECIPE):
        assert 0.5 < r.target <= 1 and r.max_steps > r.cooldown_steps + r.check_every


def test_the_target_is_on_the_weakest_targeted_behaviour():
    from satseq.envs.self_verify.warm_start import MULTITURN_RECIPE
    from satseq.models.warm_start import weakest

    scores = {"careful_verify": 0.5, "careful_revise": 0.95}
    assert weakest(scores) == 0.5 and weakest(scores, ("careful_revise",)) == 0.95
    assert weakest(scores, ("careful_verify", "careful_revise")) == 0.5
    assert set(MULTITURN_RECIPE.targeted) == {"careful_verify", "careful_revise"}  # PAG's check is a target too


def test_one_builder_at_a_time(tmp_path):
    """Two builders of the same warm start never overlap (the lock that satseq compare --jobs relies on);
    the one that waited finds the other's result and builds nothing."""
    import threading
    import time

    from satseq.models.warm_start import one_builder

    out, spans, built = tmp_path / "embedded" / "chain_seed0", [], []

    def build():
        with one_builder(out):
            t0 = time.perf_counter()
            if not (out / "done").exists():
                time.sleep(0.3)
                out.mkdir(parents=True, exist_ok=True)
                (out / "done").write_text("x")
                built.append(1)
            spans.append((t0, time.perf_counter()))

    threads = [threading.Thread(target=build) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (a0, a1), (b0, b1) = sorted(spans)
    assert a1 <= b0 and built == [1]
