"""`satseq eval`: a single model and a SAT-Seq run dir, output files, resume, config mismatch, CLI."""
import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from satseq.errors import SatseqError
from satseq.eval.cli import _parse_ks
from satseq.eval.metrics import vote_of
from satseq.eval.runner import default_output_dir, resolve_sampling, run_evaluation
from tests.conftest import ScriptedEngine

REPO = Path(__file__).resolve().parents[1]
AGENTS = ["agent_1", "agent_2", "agent_3"]
PROBLEMS = [("100+200", "300"), ("101+201", "302"), ("102+202", "304"), ("103+203", "306")]
FIELDS = {"problem_id", "prompt", "predicted_answer", "individual_answers", "pass_at_k", "avg_at_k", "maj_at_k",
          "responses", "answer", "answers", "correct"}


@pytest.fixture(scope="module")
def run_dir(tiny_dir, tmp_path_factory):
    """A SAT-Seq run dir as `satseq train` leaves it: full-mode agents at stages 1 and 2."""
    from satseq.config import TrainConfig, save_config
    from satseq.models.agents import AgentPool
    from satseq.models.loading import load_causal_lm

    d = tmp_path_factory.mktemp("run") / "sat_seq_dapo"
    model, tok = load_causal_lm(tiny_dir)
    pool = AgentPool.full(AGENTS, [model] + [copy.deepcopy(model) for _ in AGENTS[1:]], tok)
    for stage in (1, 2):
        for name in AGENTS:
            pool.save_agent(name, d / f"{name}_stage_{stage}")
    (d / "agent_1_stage_3").mkdir()  # an incomplete stage: not every agent has it
    cfg = TrainConfig()
    cfg.model.path = str(tiny_dir)
    cfg.rollout.max_new_tokens = 7
    save_config(cfg, d / "train_config.yaml")
    (d / "run_info.json").write_text(json.dumps({"method": "sat_seq", "agents": AGENTS, "mode": "full",
                                                 "base_model": str(tiny_dir), "prompt_format": "embedded"}))
    return d


@pytest.fixture()
def data_file(tmp_path):
    f = tmp_path / "data.jsonl"
    f.write_text("".join(json.dumps({"problem": p, "answer": a}) + "\n" for p, a in PROBLEMS))
    return f


def _gold(prompt: str) -> int:
    a, b = prompt.rsplit("|", 1)[1].rstrip("=").split("+")
    return int(a) + int(b)


class Counting:
    """engine_factory for run_evaluation: a ScriptedEngine whose prompts are all recorded."""

    def __init__(self, script):
        self.script, self.engines = script, []

    def __call__(self, tokenizer, batch_size=32, device="cpu"):
        eng = ScriptedEngine(tokenizer, self.script)
        self.engines.append(eng)
        return eng

    @property
    def prompts(self):
        return [c for e in self.engines for c in e.calls]


def _lines(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]


def _eval(data, ckpt, out, **kw):
    kw.setdefault("show_progress", False)
    kw.setdefault("show_table", False)
    kw.setdefault("threads", 1)
    return run_evaluation(str(data), str(ckpt), out, console=lambda *_: None, **kw)


def test_single_model_outputs_and_metrics(tiny_dir, data_file, tmp_path):
    # sample 0 right, sample 1 wrong on every problem -> pass@1 = 0.5, pass@2 = 1
    def script(prompt):
        script.i += 1
        return f"\\boxed{{{_gold(prompt) + (script.i % 2 == 0)}}}"
    script.i = 0
    out = tmp_path / "out"
    m = _eval(data_file, tiny_dir, out, n=2, engine_factory=Counting(script))
    assert {p.name for p in out.iterdir()} >= {"predictions.jsonl", "inference_config.yaml", "metrics.json"}
    rows = _lines(out)
    assert [r["problem_id"] for r in rows] == [0, 1, 2, 3]
    for r in rows:
        assert FIELDS <= set(r)
        assert r["correct"] == [True, False] and r["pass_at_k"] == {"1": 0.5, "2": 1.0}
        assert r["avg_at_k"] == {"1": 1.0, "2": 0.5}
        # a 1-1 tie between two answers: drawn by the eval seed's (0) stream for this problem, not the first seen
        won = vote_of(r["answers"], 2, tie_seed=(0, r["problem_id"]))
        assert won in r["answers"] and r["predicted_answer"] == won
        assert r["maj_at_k"]["2"] == float(won == r["answer"])
        assert len(r["individual_answers"]) == 2 and len(r["responses"]) == 2
    assert m["workflow"] == "single" and m["n_problems"] == 4 and m["samples_per_problem"] == 2
    assert m["pass@1"]["mean"] == 0.5 and m["pass@2"]["mean"] == 1.0
    assert m["maj@2"]["mean"] == sum(r["maj_at_k"]["2"] for r in rows) / 4  # the lines and the summary agree
    assert m["accuracy"] == {"mean": 0.5, "se": 0.0}
    assert json.loads((out / "metrics.json").read_text())["pass@2"] == m["pass@2"]
    cfg = yaml.safe_load((out / "inference_config.yaml").read_text())
    assert cfg["n"] == 2 and cfg["temperature"] == 0.6 and cfg["top_p"] == 0.95 and cfg["ks"] == [1, 2]
    assert cfg["workflow"] == "single" and cfg["prompt_format"] == "embedded" and "satseq eval" in cfg["command"]


def test_run_dir_reports_every_agent_and_the_vote(run_dir, data_file, tmp_path):
    wrong = {1: 1}  # agent 2 (one earlier answer shown) is off by one; agents 1 and 3 are right

    def script(prompt):
        turn = 2 - prompt.count("____")
        return f"\\boxed{{{_gold(prompt) + wrong.get(turn, 0)}}}"
    out = tmp_path / "out"
    m = _eval(data_file, run_dir, out, n=1, engine_factory=Counting(script))
    cfg = yaml.safe_load((out / "inference_config.yaml").read_text())
    assert cfg["stage"] == 2 and cfg["agents"] == AGENTS and cfg["workflow"] == "relay"
    assert cfg["max_new_tokens"] == 7 and cfg["temperature"] == 0.0  # the run's rollout budget; greedy
    r = _lines(out)[0]
    assert r["individual_answers"] == ["300", "301", "300"] and r["predicted_answer"] == "300"
    assert r["agents"] == AGENTS and r["agent_correct"] == [[True, False, True]] and r["correct"] == [True]
    assert set(m["agents"]) == set(AGENTS)
    assert [m["agents"][a]["accuracy"]["mean"] for a in AGENTS] == [1.0, 0.0, 1.0]
    assert m["vote"]["accuracy"]["mean"] == 1.0 and m["pass@1"]["mean"] == 1.0
    with pytest.raises(SatseqError, match="stage 3 has no checkpoint for agent_2"):
        _eval(data_file, run_dir, tmp_path / "o3", stage=3, engine_factory=Counting(script))


def test_run_dir_with_the_real_engine(run_dir, data_file, tmp_path):
    m = _eval(data_file, run_dir, tmp_path / "out", stage=1, limit=2, n=2, max_new_tokens=4)
    rows = _lines(tmp_path / "out")
    assert len(rows) == 2 and all(len(r["responses"]) == 2 and len(r["responses"][0]) == 3 for r in rows)
    assert m["stage"] == 1 and set(m["agents"]) == set(AGENTS) and m["n_samples"] == 4


def test_resume_skips_finished_problems_and_drops_a_torn_line(tiny_dir, data_file, tmp_path):
    def script(prompt):
        return f"\\boxed{{{_gold(prompt)}}}"
    out = tmp_path / "out"
    first = Counting(script)
    _eval(data_file, tiny_dir, out, limit=2, engine_factory=first)
    assert len(first.prompts) == 2
    with open(out / "predictions.jsonl", "a") as fh:  # a run killed while writing problem 2
        fh.write('{"problem_id": 2, "prompt": "10')
    again = Counting(script)
    m = _eval(data_file, tiny_dir, out, engine_factory=again)
    assert [p.rsplit("|", 1)[1] for p in again.prompts] == ["102+202=", "103+203="]
    rows = _lines(out)
    assert [r["problem_id"] for r in rows] == [0, 1, 2, 3]
    assert m["n_problems"] == 4 and m["accuracy"]["mean"] == 1.0
    times = json.loads((out / "metrics.json").read_text())["time_s"]
    assert times["problems_generated_this_invocation"] == 2
    nothing = Counting(script)
    _eval(data_file, tiny_dir, out, engine_factory=nothing)
    assert nothing.prompts == [] and len(_lines(out)) == 4
    # a resume with nothing left keeps the times of the invocation that generated, not its own zeros
    assert json.loads((out / "metrics.json").read_text())["time_s"] == times


def test_a_different_config_is_refused(tiny_dir, data_file, tmp_path):
    def script(prompt):
        return "\\boxed{1}"
    out = tmp_path / "out"
    _eval(data_file, tiny_dir, out, limit=1, engine_factory=Counting(script))
    with pytest.raises(SatseqError, match=r"different config \(n: 1 -> 2; temperature: 0.0 -> 0.6"):
        _eval(data_file, tiny_dir, out, n=2, engine_factory=Counting(script))
    with pytest.raises(SatseqError, match="max_new_tokens"):
        _eval(data_file, tiny_dir, out, max_new_tokens=5, engine_factory=Counting(script))
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"problem": "1+1", "answer": "2"}) + "\n")
    with pytest.raises(SatseqError, match="different"):
        _eval(other, tiny_dir, out, engine_factory=Counting(script))
    assert len(_lines(out)) == 1


def test_a_chat_run_is_evaluated_at_its_own_rollout_length(tiny_dir, data_file, tmp_path):
    """A run dir of a chat model (no ``satseq_prompt_format``) gets its rollout.max_new_tokens, not the
    512 a chat model alone gets: SmolLM2 runs answer in 32 tokens and were evaluated for 512."""
    import shutil

    from satseq.config import TrainConfig, save_config

    chat = tmp_path / "chat_model"
    shutil.copytree(tiny_dir, chat)
    conf = json.loads((chat / "config.json").read_text())
    del conf["satseq_prompt_format"]
    (chat / "config.json").write_text(json.dumps(conf))
    run = tmp_path / "grpo_run"
    shutil.copytree(chat, run / "policy_stage_1")
    cfg = TrainConfig(method="grpo")
    cfg.model.path, cfg.model.chat_template = str(chat), "never"
    cfg.data.prompt_template = "Q: {problem}\nA:"
    cfg.rollout.max_new_tokens = 9
    save_config(cfg, run / "train_config.yaml")
    (run / "run_info.json").write_text(json.dumps({"method": "grpo", "agents": ["policy"], "mode": "full",
                                                   "base_model": str(chat)}))
    out = tmp_path / "out"
    _eval(data_file, run, out, n=1, engine_factory=Counting(lambda prompt: "\\boxed{1}"))
    written = yaml.safe_load((out / "inference_config.yaml").read_text())
    assert written["prompt_format"] == "chat" and written["max_new_tokens"] == 9
    from satseq.eval.targets import CHAT_MAX_NEW_TOKENS, load_target

    alone = load_target(chat, console=lambda *_: None)
    assert alone.fmt.name == "chat" and alone.default_max_new_tokens == CHAT_MAX_NEW_TOKENS == 512


def test_defaults_and_k_parsing():
    assert resolve_sampling(1, None, None, 8).temperature == 0.0
    s = resolve_sampling(4, None, None, 8)
    assert (s.temperature, s.top_p) == (0.6, 0.95)
    assert resolve_sampling(1, 0.7, None, 8).top_p == 0.95
    assert _parse_ks(["1,8", "4"]) == [1, 8, 4] and _parse_ks(None) is None
    assert default_output_dir("aime24") == Path("outputs/aime24_inference")
    assert default_output_dir("data/gsm8k/test.jsonl") == Path("outputs/gsm8k_inference")


def _env():
    return dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))


def test_recipe_script(tiny_dir, data_file, tmp_path):
    out = tmp_path / "res"
    p = subprocess.run(["bash", str(REPO / "recipes/sat_seq/run_inference.sh"), "--dataset", str(data_file),
                        "--checkpoint_dir", str(tiny_dir), "--output_dir", str(out), "--limit", "2",
                        "--threads", "1", "--max_new_tokens", "4"],
                       capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=120)
    assert p.returncode == 0, p.stderr
    assert len(_lines(out)) == 2 and (out / "metrics.json").exists() and (out / "inference_config.yaml").exists()
    assert "pass@1" in p.stdout


def test_offline_dataset_name_is_a_one_line_error(tiny_dir, tmp_path):
    p = subprocess.run([sys.executable, "-m", "satseq.cli", "eval", "--dataset", "aime24",
                        "--data_dir", str(tmp_path / "nodata"), "--checkpoint_dir", str(tiny_dir),
                        "--output_dir", str(tmp_path / "o"), "--threads", "1"],
                       capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=120)
    assert p.returncode == 2, p.stderr
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "aime24/test.jsonl" in err[0], p.stderr
    assert "Traceback" not in p.stderr


@pytest.fixture(scope="module")
def distinct_run_dir(tiny_dir, tmp_path_factory):
    """A run dir whose three agents have different weights (agents 2 and 3 perturbed), at stage 1."""
    import torch

    from satseq.config import TrainConfig, save_config
    from satseq.models.agents import AgentPool
    from satseq.models.loading import load_causal_lm

    d = tmp_path_factory.mktemp("run") / "distinct"
    model, tok = load_causal_lm(tiny_dir)
    models = [model]
    for i in (1, 2):
        m = copy.deepcopy(model)
        g = torch.Generator().manual_seed(i)
        with torch.no_grad():
            for p in m.parameters():
                p.add_(torch.randn(p.shape, generator=g) * 0.5)
        models.append(m)
    pool = AgentPool.full(AGENTS, models, tok)
    for name in AGENTS:
        pool.save_agent(name, d / f"{name}_stage_1")
    cfg = TrainConfig()
    cfg.model.path = str(tiny_dir)
    save_config(cfg, d / "train_config.yaml")
    (d / "run_info.json").write_text(json.dumps({"method": "sat_seq", "agents": AGENTS, "mode": "full",
                                                 "base_model": str(tiny_dir), "prompt_format": "embedded"}))
    return d


def test_seat_agents_play_each_named_agents_weights(distinct_run_dir, data_file, tmp_path):
    """The adapter swap (issue 63): ``seat_agents`` in seat order is the run with those checkpoints moved on
    disk, the identity is the run itself, and a swap of agents that differ changes what the seats answer."""
    import shutil

    kw = dict(limit=2, n=1, max_new_tokens=6)
    swap = ["agent_2", "agent_1", "agent_3"]
    _eval(data_file, distinct_run_dir, tmp_path / "own", **kw)
    _eval(data_file, distinct_run_dir, tmp_path / "identity", seat_agents=AGENTS, **kw)
    _eval(data_file, distinct_run_dir, tmp_path / "swapped", seat_agents=swap, **kw)
    moved = tmp_path / "moved_run"
    shutil.copytree(distinct_run_dir, moved)
    (moved / "agent_1_stage_1").rename(moved / "tmp")
    (moved / "agent_2_stage_1").rename(moved / "agent_1_stage_1")
    (moved / "tmp").rename(moved / "agent_2_stage_1")
    _eval(data_file, moved, tmp_path / "moved", **kw)

    def responses(name):
        return [r["responses"] for r in _lines(tmp_path / name)]
    assert responses("identity") == responses("own")
    assert responses("swapped") == responses("moved")
    assert responses("swapped") != responses("own")
    cfg = yaml.safe_load((tmp_path / "swapped" / "inference_config.yaml").read_text())
    assert cfg["seat_agents"] == swap and "--seat_agents agent_2,agent_1,agent_3" in cfg["command"]
    assert cfg["run"]["checkpoints"]["agent_1"].endswith("agent_2_stage_1")
    assert "seat_agents" not in yaml.safe_load((tmp_path / "own" / "inference_config.yaml").read_text())
    with pytest.raises(SatseqError, match="--seat_agents agent_1,agent_1,agent_3: must name each of the run's agents"):
        _eval(data_file, distinct_run_dir, tmp_path / "bad", seat_agents=["agent_1", "agent_1", "agent_3"], **kw)
    assert not (tmp_path / "bad").exists()


def test_seat_agents_on_a_single_model_is_an_error(tiny_dir, data_file, tmp_path):
    with pytest.raises(SatseqError, match="--seat_agents applies to a run directory"):
        _eval(data_file, tiny_dir, tmp_path / "out", seat_agents=["a", "b"])
    assert not (tmp_path / "out").exists()
