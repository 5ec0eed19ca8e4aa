"""The warm start trained to a validation target: the schedule, the stopping rule, the validator."""
import math

import pytest

from satseq.models.sft import SFTConfig, cosine_lr, run_sft, target_lr


def test_target_schedule_is_warmup_constant_then_cosine_cooldown():
    cfg = SFTConfig(lr=1.0, warmup_steps=4, cooldown_steps=10, target=0.5)
    assert [target_lr(s, cfg, None) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert target_lr(500, cfg, None) == 1.0  # no cool-down yet: constant, whatever the step
    assert target_lr(100, cfg, 100) == 1.0
    assert target_lr(105, cfg, 100) == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.5)))
    assert target_lr(110, cfg, 100) == pytest.approx(0.0) and target_lr(200, cfg, 100) == pytest.approx(0.0)
    fixed = SFTConfig(lr=1.0, warmup_steps=0, steps=10)
    assert cosine_lr(5, fixed) == pytest.approx(0.5)


def _data(tiny, n=16):
    from satseq.data.arithmetic import ArithmeticTask

    return ArithmeticTask(seed=0).sft_examples(n)


def test_run_sft_stops_at_the_first_check_that_reaches_the_target_then_cools_down(tiny):
    import copy

    model, tok = copy.deepcopy(tiny[0]), tiny[1]
    scores = iter([0.1, 0.3, 0.9, 0.2, 0.95])
    lrs = []
    cfg = SFTConfig(steps=100, batch_size=4, lr=1e-3, warmup_steps=1, target=0.8, check_every=3, cooldown_steps=4)
    res = run_sft(model, tok, _data(tiny), cfg, show_progress=False, validate=lambda m: next(scores),
                  log=lambda d, step: lrs.append((step, d["sft/lr"])))
    # checks at steps 3, 6, 9 (0.1, 0.3, 0.9 ≥ 0.8) → cool-down from step 9 for 4 steps → 13 steps, final check
    assert [c["step"] for c in res.checks] == [3, 6, 9, 13]
    assert [c["phase"] for c in res.checks] == ["constant"] * 3 + ["final"]
    assert res.steps == 13 and len(res.losses) == 13 and res.reached_target is True
    assert res.checks[-1]["score"] == 0.2
    assert lrs[0] == (0, 1e-3) and lrs[-1] == (12, pytest.approx(1e-3 * 0.5 * (1 + math.cos(math.pi * 0.75))))


def test_run_sft_without_reaching_the_target_stops_at_the_cap(tiny):
    import copy

    model, tok = copy.deepcopy(tiny[0]), tiny[1]
    cfg = SFTConfig(steps=12, batch_size=4, warmup_steps=1, target=0.8, check_every=2, cooldown_steps=4)
    res = run_sft(model, tok, _data(tiny), cfg, show_progress=False, validate=lambda m: 0.0)
    assert res.steps == 12 and res.reached_target is False
    assert [c["step"] for c in res.checks] == [2, 4, 6, 12]  # the cool-down starts at 12 - 4 = 8 unchecked


def test_target_without_a_validator_is_refused(tiny):
    with pytest.raises(ValueError, match="validate"):
        run_sft(tiny[0], tiny[1], _data(tiny), SFTConfig(steps=2, target=0.5), show_progress=False)


def test_careful_chain_accuracy_forces_the_chain_and_grades_the_box(tiny):
    from conftest import ScriptedEngine
    from satseq.data.arithmetic import ArithmeticTask, careful_solution
    from satseq.models.warm_start import careful_chain_accuracy

    problems = ArithmeticTask(seed=0).problems(4, split="valid")
    wrong = {problems[1].problem, problems[3].problem}

    def script(prompt: str) -> str:
        p = next(p for p in problems if p.problem + "=" in prompt)
        full = careful_solution(p.meta["a"], p.meta["b"])
        assert prompt.endswith("=" + full[0])  # the chain's first character is given, not sampled
        return full[1:] if p.problem not in wrong else full[1:].replace(f"{{{p.answer}}}", "{1}")

    assert careful_chain_accuracy(None, tiny[1], problems, engine=ScriptedEngine(tiny[1], script)) == 0.5


def test_strata_give_every_batch_equal_shares(tiny, monkeypatch):
    import copy

    import satseq.models.sft as sft

    model, tok = copy.deepcopy(tiny[0]), tiny[1]
    examples = _data(tiny, 30)
    strata = [int(c.startswith("\\boxed")) for _, c in examples]
    assert 0 < sum(strata) < len(strata) and sum(strata) != len(strata) / 2  # unequal sizes in the corpus
    seen = []
    real = sft.response_logprobs
    monkeypatch.setattr(sft, "response_logprobs", lambda m, p, c, *a, **k: seen.append(c) or real(m, p, c, *a, **k))
    run_sft(model, tok, examples, SFTConfig(steps=9, batch_size=4), show_progress=False, strata=strata)
    hasty_ids = {tuple(tok(c, add_special_tokens=False)["input_ids"]) for _, c in examples if c.startswith("\\boxed")}
    for batch in seen:
        assert sum(tuple(c[:-1]) in hasty_ids for c in batch) == 2  # 2 of 4 in every batch (EOS appended)
    with pytest.raises(ValueError, match="divisible"):
        run_sft(model, tok, examples, SFTConfig(steps=1, batch_size=5), show_progress=False, strata=strata)


def test_settling_phase_runs_at_its_own_rate_until_its_check_reaches_the_target(tiny):
    import copy

    model, tok = copy.deepcopy(tiny[0]), tiny[1]
    first, then = iter([0.1, 0.9]), iter([0.5, 0.7, 0.95, 0.97])
    lrs = []
    cfg = SFTConfig(steps=100, batch_size=4, lr=1e-3, warmup_steps=1, target=0.8, check_every=3, cooldown_steps=4,
                    settle_lr=2.5e-4)
    res = run_sft(model, tok, _data(tiny), cfg, show_progress=False, validate=lambda m: next(first),
                  settle=lambda m: next(then), log=lambda d, step: lrs.append((step, d["sft/lr"])))
    # constant lr: checks at 3, 6 (0.9 reached) → settle_lr from 6: checks at 9, 12, 15 (0.95) → cool-down 15..19
    assert [(c["step"], c["phase"]) for c in res.checks] == [(3, "constant"), (6, "constant"), (9, "settle"),
                                                             (12, "settle"), (15, "settle"), (19, "final")]
    assert res.steps == 19 and res.reached_target is True
    assert target_lr(5, cfg, None, 6) == 1e-3 and target_lr(6, cfg, None, 6) == 2.5e-4
    assert target_lr(17, cfg, 15, 6) == pytest.approx(2.5e-4 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert lrs[0] == (0, 1e-3) and lrs[-1][1] < 2.5e-4


def test_settling_phase_that_never_settles_stops_at_the_cap(tiny):
    import copy

    model, tok = copy.deepcopy(tiny[0]), tiny[1]
    cfg = SFTConfig(steps=16, batch_size=4, warmup_steps=1, target=0.8, check_every=2, cooldown_steps=4,
                    settle_lr=1e-4)
    res = run_sft(model, tok, _data(tiny), cfg, show_progress=False, validate=lambda m: 1.0, settle=lambda m: 0.0)
    assert res.steps == 16 and res.reached_target is False
    assert [c["phase"] for c in res.checks] == ["constant", "settle", "settle", "settle", "settle", "final"]


def test_settling_phase_without_its_callback_is_refused(tiny):
    with pytest.raises(ValueError, match="settle"):
        run_sft(tiny[0], tiny[1], _data(tiny), SFTConfig(steps=2, target=0.5, settle_lr=1e-4),
                show_progress=False, validate=lambda m: 1.0)
