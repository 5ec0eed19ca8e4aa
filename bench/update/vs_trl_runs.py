"""The two sides of ``bench/update/vs_trl.py``, one short run per fresh process, and the one held-out
evaluation both final policies go through.

    python bench/update/vs_trl_runs.py {satseq,trl,warm} OUT/<case>/settings.json SEED OUT/<case>

Writes ``OUT/<case>/<framework>_s<SEED>.json`` (``warm``: ``OUT/<case>/warm.json``, the warm start's
held-out score per problem): step times (s), the training reward per step, the
held-out score per problem, library versions. satseq runs through its public API
(``satseq.api.train`` with the derived overrides; step time = ``time/stage``); TRL through
``GRPOTrainer`` with a callback timing ``on_step_begin`` → ``on_step_end``. Both use
``correctness_reward`` (satseq's built-in reward is the same extraction and comparison).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for p in (ROOT, ROOT / "bench" / "update"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from vs_trl import Settings, lora_kwargs, satseq_overrides, trl_config  # noqa: E402

LIBS = ("satseq", "torch", "transformers", "trl", "peft", "accelerate", "datasets")


def load_settings(path: Path) -> Settings:
    d = json.loads(Path(path).read_text())
    d["stop"] = tuple(d["stop"])
    return Settings(**d)


def versions() -> dict:
    from satseq.utils.versions import library_versions

    return library_versions(LIBS)


def task(s: Settings, seed: int, out: str, name: str):
    """satseq's config for the run, its method, and the train / held-out problems satseq will use."""
    from satseq.api import load
    from satseq.registry import get_method
    from satseq.runtime import load_datasets

    cfg = load(None, satseq_overrides(s, seed=seed, output_dir=out, run_name=name))
    method = get_method("grpo")
    train, held_out = load_datasets(cfg, method.environment(cfg))
    return cfg, method, train, held_out


def prompt_format(cfg, method, model, tok):
    """The prompt format satseq gives this model (embedded or chat/raw template)."""
    return method.environment(cfg).prompt_format(getattr(model.config, "satseq_prompt_format", "chat"), tok, cfg)


def evaluate(policy, tok, fmt, s: Settings, problems, seed: int) -> list[float]:
    """Held-out score per problem: ``s.eval_samples`` samples at ``s.temperature`` from satseq's
    engine, random streams seeded by ``seed`` only (both frameworks' policies see the same ones)."""
    import torch

    from satseq.rewards.grade import correctness_reward
    from satseq.rollout.hf_engine import HFEngine
    from satseq.rollout.types import SamplingParams

    n = s.eval_samples
    prompts = [fmt.encode(fmt.single(p.problem)) for p in problems for _ in range(n)]
    sampling = SamplingParams(max_new_tokens=s.max_new_tokens, temperature=s.temperature, stop=tuple(s.stop))
    gens = HFEngine(tok, batch_size=128).generate(policy, prompts, sampling, torch.Generator().manual_seed(1_000_003 + seed))
    scores = [correctness_reward(g.text, problems[i // n].answer) for i, g in enumerate(gens)]
    return [sum(scores[i * n:(i + 1) * n]) / n for i in range(len(problems))]


def warm_eval(s: Settings) -> list[float]:
    """The warm start's held-out score per problem (seed 0), for reference."""
    import torch

    from satseq.models.loading import load_causal_lm

    torch.set_num_threads(1)
    cfg, method, _, held_out = task(s, 0, "/tmp", "warm")
    model, tok = load_causal_lm(s.model)
    return evaluate(model, tok, prompt_format(cfg, method, model, tok), s, held_out, seed=0)


def run_satseq(s: Settings, seed: int, out: Path) -> dict:
    import torch

    from satseq.api import train
    from satseq.checkpoint import latest_agent_checkpoints
    from satseq.models.loading import load_causal_lm

    torch.set_num_threads(1)
    name = f"satseq_s{seed}"
    res = train(None, satseq_overrides(s, seed=seed, output_dir=str(out), run_name=name), console=lambda *a, **k: None)
    rows = res.metrics
    info = json.loads((res.run_dir / "run_info.json").read_text())
    agents = info["agents"]
    rollout = info.get("rollout") or {}
    print(f"[vs_trl] satseq seed {seed}: rollout {rollout.get('engine')} in {rollout.get('dtype')}, decode GEMMs "
          f"{rollout.get('gemm', 'auto')} ({rollout.get('source')}; {rollout.get('speeds')})", flush=True)
    _, dirs = latest_agent_checkpoints(res.run_dir, agents)
    if s.lora is not None:
        from peft import PeftModel

        base, tok = load_causal_lm(s.model)
        policy = PeftModel.from_pretrained(base, str(dirs[agents[0]]))
    else:
        policy, tok = load_causal_lm(str(dirs[agents[0]]))
    cfg, method, _, held_out = task(s, seed, str(out), name)
    return {"step_times": [r["time/stage"] for r in rows], "rollout_times": [r["time/rollout"] for r in rows],
            "train_acc": [r["rollout/vote_accuracy"] for r in rows], "rollout_choice": rollout,
            "eval_per_problem": evaluate(policy, tok, prompt_format(cfg, method, policy, tok), s, held_out, seed)}


def stop_token_ids(tok, stops) -> list[int]:
    """Tokens whose text ends with a stop string: as EOS ids they end a TRL completion where
    satseq's engine (decoded tail ends with a stop string) ends it."""
    ids = []
    for i in range(len(tok)):
        text = tok.decode([i], skip_special_tokens=True)
        if text and any(text.endswith(x) for x in stops):
            ids.append(i)
    return ids


def run_trl(s: Settings, seed: int, out: Path) -> dict:
    import torch

    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from satseq.data.sampler import EpochSampler
    from satseq.models.loading import load_causal_lm
    from satseq.rewards.grade import correctness_reward

    torch.set_num_threads(1)
    cfg, method, train, held_out = task(s, seed, str(out), f"trl_s{seed}")
    model, tok = load_causal_lm(s.model)
    fmt = prompt_format(cfg, method, model, tok)
    if s.stop:
        model.generation_config.eos_token_id = [tok.eos_token_id, *stop_token_ids(tok, s.stop)]
    sampler = EpochSampler(len(train), seed=seed)  # satseq's order: step k sees the prompts satseq's step k sees
    order = [i for _ in range(s.steps) for i in sampler.next_batch(s.prompts_per_step)]
    rows = [{"prompt": fmt.single(train[i].problem), "answer": train[i].answer} for i in order]
    match = all(tok(text=[r["prompt"]])["input_ids"][0] == fmt.encode(r["prompt"]) for r in rows[:s.prompts_per_step])

    def task_reward(prompts, completions, answer, **kw):
        return [correctness_reward(c, a) for c, a in zip(completions, answer)]

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.times, self.rewards, self.t0 = [], [], None

        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.times.append(time.perf_counter() - self.t0)

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "reward" in logs:
                self.rewards.append(float(logs["reward"]))

    timer = StepTimer()
    gen_times: list[float] = []  # TRL's generation (transformers generate) inside each step

    def timed(fn):
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                gen_times.append(time.perf_counter() - t0)
        return wrapper

    lora = lora_kwargs(s)
    peft_config = None
    if lora is not None:
        from peft import LoraConfig

        peft_config = LoraConfig(**lora)
    trainer = GRPOTrainer(model=model, reward_funcs=task_reward, train_dataset=Dataset.from_list(rows),
                          args=GRPOConfig(**trl_config(s, seed=seed, output_dir=str(out / f"trl_s{seed}"))),
                          processing_class=tok, peft_config=peft_config, callbacks=[timer])
    trainer._generate_single_turn = timed(trainer._generate_single_turn)
    trainer.train()
    policy = trainer.model
    return {"step_times": timer.times, "rollout_times": gen_times, "train_acc": timer.rewards, "prompt_ids_match": match,
            "eval_per_problem": evaluate(policy, tok, fmt, s, held_out, seed)}


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if argv else 2)
    framework, settings_file, seed, out = argv[:4]
    s, seed, out = load_settings(Path(settings_file)), int(seed), Path(out)
    from satseq.utils.io import write_json

    if framework == "warm":  # the warm start's held-out scores, for reference
        write_json(out / "warm.json", warm_eval(s))
        return
    res = (run_satseq if framework == "satseq" else run_trl)(s, seed, out)
    import resource

    res.update(framework=framework, seed=seed, versions=versions(),
               peak_rss_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)
    write_json(out / f"{framework}_s{seed}.json", res)


if __name__ == "__main__":
    main()
