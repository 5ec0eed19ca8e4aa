"""``rollout.engine=vllm`` against the trainer's own forward, on the tiny model (fp32, CPU build of vLLM).

Run by ``make test`` in ``.venv-vllm`` (``make setup-vllm``: vLLM's CPU build needs transformers < 5.20,
docs/vllm.md), with ``SATSEQ_REQUIRE_VLLM=1`` so that a broken install fails instead of skipping.

The tolerance: vLLM's kernels (its own attention, fused QKV, SiLU-and-mul) sum in another order than
transformers' eager forward, so fp32 log-probs of the same tokens differ by rounding: measured
≤ 3e-5 on this model (log-probs up to ≈ 5); the tests allow rounding at the log-probs' magnitude
(tests/numerics.py: 256 fp32 ulps of it, ≈ 1.5e-4 here).
"""
from __future__ import annotations

import json
import os

import pytest
import torch

pytestmark = pytest.mark.vllm
if os.environ.get("SATSEQ_REQUIRE_VLLM") != "1":
    pytest.importorskip("vllm")

from numerics import fp_tol

#: ``max_gap`` is in units of the rounding tolerance (tests/numerics.py): below 1 is agreement
TOL = 1.0


def trainer_logprobs(model, gens, pad_id, temperature=1.0):
    from satseq.rollout.logprobs import response_logits, token_logprobs

    model.eval()
    with torch.no_grad():
        logits, mask = response_logits(model, [g.prompt_ids for g in gens], [g.response_ids for g in gens], pad_id)
        resp = torch.zeros(mask.shape, dtype=torch.long)
        for i, g in enumerate(gens):
            resp[i, :len(g.response_ids)] = torch.tensor(g.response_ids)
        lp = token_logprobs(logits, resp, temperature)
    return [lp[i, :len(g.response_ids)] for i, g in enumerate(gens)]


def max_gap(model, gens, pad_id, temperature=1.0) -> float:
    ref = trainer_logprobs(model, gens, pad_id, temperature)
    return max(float((r - torch.tensor(g.logprobs)).abs().max()) / fp_tol(r) for r, g in zip(ref, gens)
               if g.response_ids)


def prompts(tok, n=6):
    return [tok.encode(f"{100 + 37 * i}+{250 + 11 * i}=") for i in range(n)]


def streams(n, seed=0):
    return [torch.Generator().manual_seed(seed * 1000 + i) for i in range(n)]


@pytest.fixture(scope="module")
def full_model():
    from satseq.models.tiny import build_tiny_model

    return build_tiny_model(seed=3)


@pytest.mark.numerics
def test_logprobs_equal_the_trainers_forward_before_and_after_updates(full_model):
    from satseq.rollout.types import SamplingParams
    from satseq.rollout.vllm_engine import VLLMEngine

    model, tok = full_model
    engine = VLLMEngine(tok)
    sp = SamplingParams(max_new_tokens=12, temperature=1.0)
    gens = engine.generate(model, prompts(tok), sp, streams(6))
    assert all(len(g.response_ids) == len(g.logprobs) > 0 for g in gens)
    assert max_gap(model, gens, tok.pad_token_id) < TOL
    # another temperature: processed log-probs under softmax(z / T), as the trainer scores them
    cold = engine.generate(model, prompts(tok), SamplingParams(max_new_tokens=12, temperature=0.7), streams(6))
    assert max_gap(model, cold, tok.pad_token_id, temperature=0.7) < TOL
    reloads = engine.reloads
    # an optimizer step lands: the next call samples from the new weights
    opt = torch.optim.Adam(model.parameters(), lr=5e-2)
    loss = sum((p ** 2).sum() for p in model.parameters()) * 1e-3
    loss.backward()
    opt.step()
    opt.zero_grad()
    after = engine.generate(model, prompts(tok), sp, streams(6))
    assert engine.reloads == reloads + 1
    assert max_gap(model, after, tok.pad_token_id) < TOL
    old = trainer_logprobs(model, gens, tok.pad_token_id)  # the new weights moved the old samples' log-probs
    assert max(float((o - torch.tensor(g.logprobs)).abs().max()) / fp_tol(o) for o, g in zip(old, gens)) > 10 * TOL
    # nothing changed: no reload
    engine.generate(model, prompts(tok), sp, streams(6))
    assert engine.reloads == reloads + 1


def test_a_seed_fixes_the_samples_whatever_the_batch(full_model):
    from satseq.rollout.types import SamplingParams
    from satseq.rollout.vllm_engine import VLLMEngine

    model, tok = full_model
    engine = VLLMEngine(tok)
    sp = SamplingParams(max_new_tokens=10, temperature=1.0)
    ps = prompts(tok)
    whole = engine.generate(model, ps, sp, streams(6, seed=1))
    again = engine.generate(model, ps, sp, streams(6, seed=1))
    assert [g.response_ids for g in whole] == [g.response_ids for g in again]
    s = streams(6, seed=1)  # two halves, each with its own rows' streams: the same tokens
    split = engine.generate(model, ps[:3], sp, s[:3]) + engine.generate(model, ps[3:], sp, s[3:])
    assert [g.response_ids for g in whole] == [g.response_ids for g in split]
    other = engine.generate(model, ps, sp, streams(6, seed=2))
    assert [g.response_ids for g in whole] != [g.response_ids for g in other]
    greedy = engine.generate(model, ps, SamplingParams(max_new_tokens=10, temperature=0.0), None)
    ref = trainer_logprobs(model, greedy, tok.pad_token_id)
    assert max(float((r - torch.tensor(g.logprobs)).abs().max()) / fp_tol(r) for r, g in zip(ref, greedy)) < TOL


def test_stop_strings_and_finish_reasons_match_satseqs_engine(full_model):
    from satseq.rollout.hf_engine import HFEngine
    from satseq.rollout.types import SamplingParams
    from satseq.rollout.vllm_engine import VLLMEngine

    model, tok = full_model
    engine = VLLMEngine(tok)
    hf = HFEngine(tok)
    greedy = SamplingParams(max_new_tokens=16, temperature=0.0)
    ours, theirs = hf.generate(model, prompts(tok), greedy), engine.generate(model, prompts(tok), greedy)
    # greedy decoding of the same weights: the same tokens, text and finish reasons
    assert [g.response_ids for g in ours] == [g.response_ids for g in theirs]
    assert [(g.text, g.finish_reason) for g in ours] == [(g.text, g.finish_reason) for g in theirs]
    text = theirs[0].text
    stop = text[3:5] if len(text) >= 5 else None
    if stop:
        sp = SamplingParams(max_new_tokens=16, temperature=0.0, stop=(stop,))
        a, b = hf.generate(model, prompts(tok)[:1], sp)[0], engine.generate(model, prompts(tok)[:1], sp)[0]
        assert (a.text, a.finish_reason, a.response_ids) == (b.text, b.finish_reason, b.response_ids)
        assert b.text.endswith(stop) and b.finish_reason == "stop"


@pytest.mark.numerics
@pytest.mark.parametrize("lora_mode", ["adapter", "merged"])
def test_three_lora_agents_on_one_engine_stay_in_sync_through_a_relay(lora_mode):
    """Per-request adapters, or the acting agent's merged weights reloaded per turn
    (``rollout.vllm.lora_mode``): either way every agent samples from its own current weights."""
    from satseq.config.schema import VllmConfig
    from satseq.models.agents import AgentPool
    from satseq.models.tiny import build_tiny_model
    from satseq.rollout.types import SamplingParams
    from satseq.rollout.vllm_engine import VLLMEngine

    base, tok = build_tiny_model(seed=4)
    pool = AgentPool.lora(["a1", "a2", "a3"], base, tok, r=8, alpha=16, dropout=0.0)
    torch.manual_seed(0)
    with torch.no_grad():  # distinct adapters (peft starts B at 0: every agent would be the base)
        for n, p in pool.module("a1").named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.3)
    engine = VLLMEngine(tok, settings=VllmConfig(lora_mode=lora_mode))
    sp = SamplingParams(max_new_tokens=8, temperature=1.0)
    texts = [tok.decode(p) for p in prompts(tok, 4)]
    seen = {}
    for agent in pool.names:  # a relay: each agent answers after the ones before it
        ids = [tok.encode(t) for t in texts]
        gens = engine.generate(pool.module(agent), ids, sp, streams(4, seed=len(seen)))
        assert max_gap(pool.module(agent), gens, tok.pad_token_id) < TOL, agent
        seen[agent] = gens
        texts = [t + g.text[:4] + "|" for t, g in zip(texts, gens)]
    # adapters: the base loaded once, each adapter registered once; merged: one reload per agent turn
    assert (engine.adapter_versions, engine.reloads) == ((3, 1) if lora_mode == "adapter" else (0, 3))
    # the agents differ: the same prompts under another adapter have other log-probs
    a1 = seen["a1"]
    other = trainer_logprobs(pool.module("a2"), a1, tok.pad_token_id)
    assert max(float((o - torch.tensor(g.logprobs)).abs().max()) / fp_tol(o) for o, g in zip(other, a1)) > 10 * TOL
    # one agent's update lands: only its adapter is re-registered, under a new id
    model = pool.module("a2")
    opt = torch.optim.SGD(pool.parameters("a2"), lr=0.5)
    loss = sum((p ** 2).sum() for p in pool.parameters("a2"))
    loss.backward()
    opt.step()
    ids = [tok.encode(t) for t in texts]
    for agent in pool.names:
        gens = engine.generate(pool.module(agent), ids, sp, streams(4, seed=9))
        assert max_gap(pool.module(agent), gens, tok.pad_token_id) < TOL, agent
    assert (engine.adapter_versions, engine.reloads) == ((4, 1) if lora_mode == "adapter" else (0, 6))
    assert model is pool.module("a2")


def test_a_rejected_sat_seq_proposal_leaves_the_engine_on_the_old_weights(full_model):
    from satseq.methods.sat_seq.kl.quantile_kl_ctrl import QuantileKLController
    from satseq.rollout.types import SamplingParams
    from satseq.rollout.vllm_engine import VLLMEngine

    model, tok = full_model
    engine = VLLMEngine(tok)
    sp = SamplingParams(max_new_tokens=8, temperature=1.0)
    before = engine.generate(model, prompts(tok), sp, streams(6, seed=5))
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=1.0)

    def propose(beta):  # a large step, which the check refuses
        loss = sum((p ** 2).sum() for p in params)
        loss.backward()
        opt.step()
        opt.zero_grad()

    def measure_kl():
        return torch.full((16,), 10.0)  # per-state KL far above the target, every time

    ctrl = QuantileKLController(target_kl=0.05, quantile=0.99, max_backtracks=2, alpha=0.5)
    res = ctrl.run(params, opt, 0.001, propose, measure_kl)
    assert not res.accepted
    after = engine.generate(model, prompts(tok), sp, streams(6, seed=5))
    assert [g.response_ids for g in after] == [g.response_ids for g in before]
    assert [g.logprobs for g in after] == [g.logprobs for g in before]
    assert max_gap(model, after, tok.pad_token_id) < TOL


@pytest.mark.numerics
def test_the_kv_cache_block_is_32_on_cpu_or_the_setting_and_log_probs_hold_at_each(full_model):
    from satseq.config.schema import VllmConfig
    from satseq.errors import ConfigError
    from satseq.rollout.types import SamplingParams
    from satseq.rollout.vllm_engine import VLLMEngine

    model, tok = full_model
    sp = SamplingParams(max_new_tokens=12, temperature=1.0)
    for settings, block in [(VllmConfig(), 32), (VllmConfig(block_size=64), 64)]:
        engine = VLLMEngine(tok, settings=settings)
        gens = engine.generate(model, prompts(tok), sp, streams(6))
        assert engine._engine.llm.llm_engine.vllm_config.cache_config.block_size == block
        assert max_gap(model, gens, tok.pad_token_id) < TOL
    with pytest.raises(ConfigError, match=r"^rollout.vllm.block_size=16: vLLM refuses it"):
        VLLMEngine(tok, settings=VllmConfig(block_size=16)).generate(model, prompts(tok), sp, streams(6))


def test_an_engine_is_started_on_the_main_thread_and_leaves_the_global_generator_alone(full_model):
    """The rollout thread's engine (trainer.max_staleness with vLLM) is start()ed on the trainer's thread:
    vLLM seeds torch's global generator at start, and a fork taken in another thread would restore it
    under the trainer's feet. Off the main thread, an engine not started is refused."""
    import threading

    from satseq.rollout.types import SamplingParams
    from satseq.rollout.vllm_engine import VLLMEngine

    model, tok = full_model
    sp = SamplingParams(max_new_tokens=6, temperature=1.0)
    engine = VLLMEngine(tok, instance="test-thread")
    errors, out = [], []
    threads = torch.get_num_threads()

    def call():
        from satseq.rollout.vllm_engine import _SET_NUM_THREADS

        _SET_NUM_THREADS(threads)  # OpenMP's count is per thread (vLLM made torch.set_num_threads a no-op)
        try:
            out.extend(engine.generate(model, prompts(tok), sp, streams(6)))
        except RuntimeError as e:
            errors.append(str(e))

    t = threading.Thread(target=call)
    t.start()
    t.join()
    assert errors and "start() the engine on the main thread" in errors[0] and engine._engine is None
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    engine.start(model)  # vLLM seeds the global generator at start; the fork hides it
    assert torch.equal(torch.rand(3), expected)
    other = VLLMEngine(tok)  # another instance name: another vLLM
    other.generate(model, prompts(tok), sp, streams(6))
    assert other._engine is not engine._engine
    t = threading.Thread(target=call)
    t.start()
    t.join()
    assert len(out) == 6 and max_gap(model, out, tok.pad_token_id) < TOL
    threads += 1  # a thread at another OpenMP count generates at the engine's (vLLM's CPU attention aborts otherwise)
    t = threading.Thread(target=call)
    t.start()
    t.join()
    assert len(errors) == 1 and len(out) == 12 and max_gap(model, out[6:], tok.pad_token_id) < TOL


def test_errors_name_the_key_and_the_fix(full_model, monkeypatch):
    from satseq.errors import ConfigError
    from satseq.rollout.types import SamplingParams
    from satseq.config.schema import VllmConfig
    from satseq.rollout.vllm_engine import VLLMEngine

    model, tok = full_model
    engine = VLLMEngine(tok, settings=VllmConfig(max_model_len=32))
    with pytest.raises(ConfigError, match=r"rollout.vllm.max_model_len.*exceeds the engine's 32"):
        engine.generate(model, prompts(tok), SamplingParams(max_new_tokens=30))
    engine = VLLMEngine(tok)
    check = VLLMEngine._check_architecture
    monkeypatch.setattr(VLLMEngine, "_check_architecture", lambda self, arch: check(self, "NoSuchForCausalLM"))
    monkeypatch.setattr("satseq.rollout.vllm_engine._ENGINES", {})  # a fresh start, which checks the architecture
    with pytest.raises(ConfigError, match="does not support the architecture NoSuchForCausalLM; use rollout.engine=hf"):
        engine.generate(model, prompts(tok), SamplingParams(max_new_tokens=4))


# ----------------------------------------------------------------------------- every method, end to end
def _method_rows(run_dir):
    import json

    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/") and k not in ("time", "wall_time")} for r in rows]


def _stage_weights(run_dir):
    from safetensors.torch import load_file

    return {f"{f.parent.name}/{k}": v for f in sorted(run_dir.glob("*_stage_2/*.safetensors"))
            for k, v in load_file(f).items()}


FAST = ["trainer.train_batch_size=2", "grpo.group_size=2", "sat_seq.group_size=2", "rollout.max_new_tokens=6",
        "data.train_size=8", "data.eval_size=4", "trainer.tensorboard=false", "trainer.progress=false",
        "trainer.num_stages=2", "trainer.eval_every=2", "ppo.lr=1e-3", "sat_seq.lr=1e-3", "rollout.engine=vllm",
        # the certificate's batch (256 prompts by default) through vLLM's CPU LoRA kernels was half of each
        # SAT-Seq run here; 8 prompts still certify before the first stage and after the last, on the engine
        "sat_seq.certificate.prompts=8"]
SPEED = {"apo": ["apo.n_samples=2"]}


def _methods():
    from satseq.registry import method_names

    return [(m, True) for m in method_names()] + [("sat_seq", False), ("grpo", False)]  # LoRA agents, and full


@pytest.mark.parametrize("method,lora", _methods())
def test_every_method_trains_with_vllm_and_an_interrupted_run_resumes_it_exactly(method, lora, tiny_dir, tmp_path):
    """Two stages with ``rollout.engine=vllm``; the same run stopped after stage 1 and resumed gives the
    same metrics and weights (the engine re-syncs to the resumed weights before its first rollout). The
    real SIGKILL of every method is tests/test_method_contract.py's; one with vLLM is below."""
    import satseq
    from satseq.loop import train

    args = [f"model.path={tiny_dir}", f"method={method}", f"model.lora.enabled={str(lora).lower()}", *FAST,
            *SPEED.get(method, []), f"output_dir={tmp_path}"]
    whole = train(satseq.load(overrides=args + ["run_name=whole"]), console=lambda *a, **k: None)
    train(satseq.load(overrides=args + ["run_name=resumed"]), console=lambda *a, **k: None, stop_after=1)
    resumed = train(satseq.load(overrides=args + ["run_name=resumed"]), console=lambda *a, **k: None)
    rows, again = _method_rows(whole), _method_rows(resumed)
    wa, wb = _stage_weights(whole), _stage_weights(resumed)
    assert len(rows) == 2 and wa and wa.keys() == wb.keys()
    # bitwise, A*-PO with LoRA included: its dropout draws from torch's global generator, which vLLM's
    # engine start would advance if the engine did not run on a fork of it
    assert rows == again, [(a["step"], k, a[k], b.get(k)) for a, b in zip(rows, again) for k in a if a[k] != b.get(k)]
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    if method in ("sat_seq", "grpo", "simultaneous", "mlmt", "pag"):  # the TIS weight is logged per agent
        assert any(k.endswith("/is_engine_mean") for k in rows[0]), sorted(rows[0])
    # every update measures the engine's log-probs of its batch against the trainer's, before its first
    # step: at stage 1 that is after the stage-0 update landed, so a stale engine would show here
    gaps = [r[k] for r in rows for k in r if k.endswith(("/logprob_gap", "/logprob_gap_max"))]
    assert all(g < fp_tol(5.0) for g in gaps), gaps  # the logged gap is absolute: log-probs here are ≤ 5
    # the built-in policy-gradient methods log it (A*-PO's regression does not; a test's toy method may not)
    assert gaps or method not in ("sat_seq", "grpo", "simultaneous", "shared_policy", "mlmt", "pag"), sorted(rows[1])


@pytest.mark.parametrize("workflow", [None, "coach"])
def test_satseq_eval_with_vllm_writes_the_same_files_and_metrics(workflow, tiny_dir, tmp_path):
    """Greedy decoding of the same weights: both engines sample the same tokens, so ``satseq eval
    --engine vllm`` writes what the default engine writes (the config adds ``engine: vllm``)."""
    import json

    import yaml

    from satseq.eval.runner import run_evaluation

    out = {}
    for engine in ("hf", "vllm"):
        d = tmp_path / engine
        run_evaluation("embedded", str(tiny_dir), d, n=1, limit=4, max_new_tokens=6, threads=1, show_progress=False,
                       show_table=False, console=lambda *a, **k: None, engine=engine, workflow=workflow)
        assert sorted(p.name for p in d.iterdir()) == ["inference_config.yaml", "metrics.json", "predictions.jsonl"]
        metrics = json.loads((d / "metrics.json").read_text())
        metrics.pop("time_s", None)
        config = yaml.safe_load((d / "inference_config.yaml").read_text())
        out[engine] = (metrics, (d / "predictions.jsonl").read_text(), config)
    assert out["vllm"][0] == out["hf"][0]
    assert out["vllm"][1] == out["hf"][1]
    cfg_hf, cfg_vllm = out["hf"][2], out["vllm"][2]
    assert cfg_vllm.pop("engine") == "vllm" and "--engine vllm" in cfg_vllm.pop("command")
    cfg_hf.pop("command")
    cfg_hf.pop("output_dir", None), cfg_vllm.pop("output_dir", None)
    assert cfg_vllm == cfg_hf


def test_a_killed_sat_seq_run_with_vllm_resumes_exactly(tiny_dir, tmp_path):
    """A real SIGKILL in the middle of stage 1 (three full agents on one engine, reloaded per turn), then the
    same run resumed. The killed run is a fresh ``satseq train`` process; the whole run and the resumed one
    run here (each vLLM process start is ~20 s on CPU). (LoRA agents resume in the in-process test above;
    vLLM's CPU LoRA path is slow.)"""
    import subprocess
    import sys

    import satseq
    from satseq.loop import train

    args = [f"model.path={tiny_dir}", "method=sat_seq", "model.lora.enabled=false", *FAST, f"output_dir={tmp_path}"]
    quiet = lambda *a, **k: None  # noqa: E731
    train(satseq.load(overrides=[*args, "run_name=whole"]), console=quiet)
    killed = subprocess.run([sys.executable, "-m", "satseq.cli", "train", *args, "run_name=resumed"],
                            capture_output=True, text=True, timeout=900,
                            env=dict(os.environ, SATSEQ_KILL_AT_STAGE="1"))
    assert killed.returncode == -9, killed.stderr[-2000:]
    a, b = tmp_path / "whole", tmp_path / "resumed"
    assert [json.loads(x)["step"] for x in (b / "metrics.jsonl").read_text().splitlines()] == [0]
    said = []
    train(satseq.load(overrides=[*args, "run_name=resumed"]), console=lambda *m, **k: said.append(" ".join(map(str, m))))
    assert any("resuming" in line for line in said), said
    assert len(_method_rows(a)) == 2 and _method_rows(a) == _method_rows(b)
    wa, wb = _stage_weights(a), _stage_weights(b)
    assert wa and wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.mark.numerics
@pytest.mark.parametrize("lora_mode", ["adapter", "merged"])
def test_a_lora_pools_reference_policy_samples_from_the_base(lora_mode):
    from satseq.config.schema import VllmConfig
    from satseq.models.agents import AgentPool
    from satseq.models.tiny import build_tiny_model
    from satseq.rollout.types import SamplingParams
    from satseq.rollout.vllm_engine import VLLMEngine

    base, tok = build_tiny_model(seed=5)
    pool = AgentPool.lora(["a1"], base, tok, r=8, alpha=16, dropout=0.0)
    with torch.no_grad():
        for n, p in pool.module("a1").named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.3)
    engine = VLLMEngine(tok, settings=VllmConfig(lora_mode=lora_mode))
    sp = SamplingParams(max_new_tokens=8, temperature=1.0)
    with pool.reference("a1") as ref:
        gens = engine.generate(ref, prompts(tok, 4), sp, streams(4))
        assert max_gap(ref, gens, tok.pad_token_id) < TOL
    gens = engine.generate(pool.module("a1"), prompts(tok, 4), sp, streams(4))
    assert max_gap(pool.module("a1"), gens, tok.pad_token_id) < TOL
