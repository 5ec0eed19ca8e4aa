"""The chain warm start that ships with satseq (satseq/models/shipped.py): it was built by today's code,
it records how it was made, ``satseq sft --task chain --ship`` makes it, and runs use it instead of a
10-minute SFT, but only while the code that builds it is unchanged."""
import json
import shutil

import pytest
from safetensors.torch import load_file


def test_the_shipped_chain_warm_start_was_built_by_todays_code():
    from satseq.models.embedded_tasks import CHAIN_RECIPE
    from satseq.models.shipped import code_fingerprint, shipped_dir, shipped_info

    info = shipped_info("chain", 0)
    assert info is not None, "no chain warm start ships: run `satseq sft --task chain --ship` and commit satseq/warm_starts/"
    assert info["shipped"]["fingerprint"] == code_fingerprint(), (
        "the code that builds the chain warm start changed since it was shipped: run `satseq sft --task chain --ship` "
        "(≈ 10 min) and commit satseq/warm_starts/")
    # how it was made: commit, CPU, kernel path, steps and every validation check, each behaviour at its target
    ship = info["shipped"]
    assert len(ship["commit"]) == 40 and ship["cpu"] and ship["kernel_path"] and ship["torch"]
    assert info["reached_target"] is True and info["steps"] > 0 and ship["base_warm_start"]["reached_target"]
    final = info["checks"][-1]["behaviours"]
    assert set(final) >= {"stage1", "stage2", "copy"} and min(final.values()) >= CHAIN_RECIPE.target, final
    assert (shipped_dir("chain", 0) / "model.safetensors").stat().st_size < 12 * 2 ** 20  # fp32, ≈ 9 MB


def test_the_fingerprint_ignores_docstrings_and_comments_and_sees_code():
    from satseq.models.shipped import source_fingerprint

    base = 'def f(x):\n    """Doc."""\n    return x + 1\n'
    assert source_fingerprint(base) == source_fingerprint('def f(x):\n    # a comment\n    return x + 1  # more\n')
    assert source_fingerprint(base) == source_fingerprint('"""Module doc."""\ndef f(x):\n\n    return (x + 1)\n')
    assert source_fingerprint(base) != source_fingerprint('def f(x):\n    """Doc."""\n    return x + 2\n')


def _tiny_recipes(monkeypatch):
    """Base and chain recipes a few steps long (the real ones take ≈ 10 minutes)."""
    from dataclasses import replace

    import satseq.models.embedded_tasks as et
    import satseq.models.warm_start as ws
    from satseq.models.sft import SFTConfig

    import satseq.data.relay_chain as rc
    from satseq.data.arithmetic import ArithmeticTask

    monkeypatch.setattr(ws, "base_sft_config", lambda seed=0: SFTConfig(seed=seed, steps=2, batch_size=4))
    monkeypatch.setattr(ws, "VALIDATION_SIZE", 4)
    real_chain, real_base = rc.chain_examples, ArithmeticTask.sft_examples
    monkeypatch.setattr(rc, "chain_examples", lambda n, **kw: real_chain(min(n, 64), **kw))
    monkeypatch.setattr(ArithmeticTask, "sft_examples", lambda self, n, **kw: real_base(self, min(n, 64), **kw))
    monkeypatch.setattr(et, "CHAIN_RECIPE", replace(et.CHAIN_RECIPE, target=0.0, check_every=1, cooldown_steps=1,
                                                    max_steps=6, max_new_tokens=4))


def test_ship_builds_from_scratch_records_it_and_runs_use_it(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import satseq.models.shipped as shipped
    from satseq.cli import app
    from satseq.models.embedded_tasks import ensure_chain_warm_start

    _tiny_recipes(monkeypatch)
    monkeypatch.setattr(shipped, "SHIPPED_DIR", tmp_path / "pkg" / "warm_starts")
    (tmp_path / "pkg").mkdir()
    monkeypatch.delenv("SATSEQ_NO_SHIPPED", raising=False)
    r = CliRunner().invoke(app, ["sft", "--task", "chain", "--ship", "--out", str(tmp_path / "build"), "--threads", "1"])
    monkeypatch.delenv("SATSEQ_NO_SHIPPED", raising=False)  # the command sets it for its own process
    assert r.exit_code == 0, r.output
    dest = tmp_path / "pkg" / "warm_starts" / "chain_seed0"
    info = json.loads((dest / "warm_start.json").read_text())
    assert info["shipped"]["fingerprint"] == shipped.code_fingerprint() and info["shipped"]["cpu"]
    assert info["steps"] > 0 and info["checks"][-1]["behaviours"]
    assert info["shipped"]["base_warm_start"]["steps"] == 2  # and the base's record, which it continued
    assert (tmp_path / "build" / "embedded" / "warm_start_seed0").exists()  # the base was built too, from scratch

    # a run with no warm start of its own copies the shipped one, whatever this CPU would have built
    lines = []
    out = ensure_chain_warm_start(tmp_path / "run", seed=0, console=lines.append)
    assert any("shipped with satseq" in ln for ln in lines)
    assert load_file(str(out / "model.safetensors")).keys() == load_file(str(dest / "model.safetensors")).keys()
    assert (out / "model.safetensors").read_bytes() == (dest / "model.safetensors").read_bytes()
    assert not (tmp_path / "run" / "embedded" / "warm_start_seed0").exists()  # no base SFT was needed

    # once the code that builds it changes, the shipped one is stale: a run builds its own
    monkeypatch.setattr(shipped, "code_fingerprint", lambda modules=shipped.BUILD_MODULES: "changed")
    assert shipped.shipped_warm_start("chain", 0, n_examples=info["n_examples"], eval_size=1000) is None
    lines.clear()
    ensure_chain_warm_start(tmp_path / "other", seed=0, console=lines.append)
    assert not any("shipped with satseq" in ln for ln in lines)
    assert (tmp_path / "other" / "embedded" / "warm_start_seed0").exists()


def test_ship_is_only_for_a_warm_start_that_ships(tmp_path):
    from typer.testing import CliRunner

    from satseq.cli import app

    r = CliRunner().invoke(app, ["sft", "--task", "mlmt", "--ship", "--out", str(tmp_path)])
    assert r.exit_code != 0 and "--ship" in r.output and not (tmp_path / "embedded").exists()


def test_an_interrupted_copy_leaves_the_old_directory_and_no_temporary(tmp_path):
    from satseq.utils.io import atomic_dir

    out = tmp_path / "chain_seed0"
    out.mkdir()
    (out / "old").write_text("kept")
    with pytest.raises(RuntimeError):
        with atomic_dir(out) as tmp:
            (tmp / "new").write_text("half")
            raise RuntimeError("interrupted")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chain_seed0"] and (out / "old").read_text() == "kept"
    with atomic_dir(out) as tmp:
        (tmp / "new").write_text("whole")
    assert sorted(p.name for p in out.iterdir()) == ["new"]
