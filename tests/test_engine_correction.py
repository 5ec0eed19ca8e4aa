"""The engine-mismatch correction (truncated importance sampling) against a reference loop, and
``rollout.engine=vllm`` refused with one line where vLLM is not installed."""
from __future__ import annotations

import math

import pytest
import torch

from satseq.algos.engine_is import engine_is_weights
from satseq.update.engine_correction import EngineCorrection, corrected_advantages


def _reference(trainer, engine, lengths, cap, level):
    """min(C, π_trainer/π_engine) by hand: per token, or the product over a sequence's tokens."""
    out = []
    for t, e, n in zip(trainer, engine, lengths):
        ratios = [math.exp(a - b) for a, b in zip(t[:n], e[:n])]
        if level == "token":
            out.append([min(cap, r) for r in ratios] + [0.0] * (len(t) - n))
        else:
            out.append(min(cap, math.prod(ratios)))
    return torch.tensor(out)


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_truncated_is_weights_equal_the_reference(level):
    g = torch.Generator().manual_seed(1)
    trainer = torch.randn(5, 7, generator=g) * 0.5 - 2
    engine = trainer + torch.randn(5, 7, generator=g) * 0.6
    lengths = [7, 3, 5, 1, 6]
    mask = torch.tensor([[1.0] * n + [0.0] * (7 - n) for n in lengths])
    w, stats = engine_is_weights(trainer, engine, mask, cap=1.5, level=level)
    ref = _reference(trainer.tolist(), engine.tolist(), lengths, 1.5, level)
    assert torch.allclose(w, ref, atol=1e-6)
    raw = torch.exp((trainer - engine) * mask) if level == "token" else torch.exp(((trainer - engine) * mask).sum(-1))
    cut = (raw > 1.5).float()
    share = (cut * mask).sum() / mask.sum() if level == "token" else cut.mean()
    assert stats["is_engine_truncated"] == pytest.approx(float(share))
    assert 0 < stats["is_engine_truncated"] < 1  # the draw truncates some weights and not others


def test_identical_policies_weigh_one_and_off_changes_nothing():
    lp = torch.randn(3, 4)
    mask = torch.ones(3, 4)
    adv = torch.tensor([1.0, -2.0, 0.5])
    out, stats = corrected_advantages(EngineCorrection("token", 2.0), adv, lp, mask, lp.tolist())
    assert torch.allclose(out, adv[:, None].expand(3, 4)) and stats["is_engine_truncated"] == 0.0
    out, stats = corrected_advantages(EngineCorrection("sequence", 2.0), adv, lp, mask, lp.tolist())
    assert torch.allclose(out, adv) and stats["is_engine_mean"] == pytest.approx(1.0)
    out, stats = corrected_advantages(EngineCorrection("off"), adv, lp, mask, (lp + 1).tolist())
    assert out is adv and stats == {}


def test_auto_is_token_level_with_vllm_and_off_with_satseqs_engine():
    import satseq

    assert EngineCorrection.from_config(satseq.load(overrides=["rollout.engine=vllm"])) == EngineCorrection("token", 2.0)
    assert not EngineCorrection.from_config(satseq.load()).on
    assert EngineCorrection.from_config(satseq.load(overrides=["rollout.is_correction=sequence",
                                                               "rollout.is_cap=3"])) == EngineCorrection("sequence", 3.0)


def test_the_vllm_engine_without_vllm_is_one_line_naming_the_install(tiny):
    from satseq.errors import ConfigError
    from satseq.rollout.engine import make_engine

    try:
        import vllm  # noqa: F401
        pytest.skip("vLLM is installed here; tests/test_vllm_engine.py covers the engine")
    except Exception:  # noqa: BLE001
        pass
    with pytest.raises(ConfigError) as e:
        make_engine("vllm", tiny[1])
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("rollout.engine=vllm: vLLM is not installed")
    assert "make setup-vllm" in msg and "rollout.engine=hf" in msg
