"""The trivial baselines reported beside every compared method, and the summary of one evaluation.

* **Warm start** (:func:`warm_start_run`): the policy every run of a method started from, evaluated
  exactly as the trained runs are. It is written as a run directory at stage 0
  (``OUT/baselines/warm_start_<workflow>_<hash>/``: the first run's ``run_info.json`` and
  ``train_config.yaml``, each agent's ``<agent>_stage_0`` a link to its starting model), so
  ``satseq eval`` runs it in the method's own workflow (SAT-Seq: the relay and its vote, PAG: solve →
  verify → revise, MLMT: solve → feedback → refine). Runs whose warm starts, workflow and
  prompting agree share one. A LoRA run's start is its base model with the adapters it began from
  (fresh ones: B = 0, the base's function exactly), saved as ``<agent>_stage_0`` adapter dirs.
* **Best-of-k of the warm start**: its pass@k from the same evaluation (``eval.k`` samples), the
  ceiling of what RL can select from it.
* **Verifier (PAG)** (:func:`verifier_baselines`): the trained verifier against the constant verifiers
  "always correct" and "always wrong" on the same judged attempts. Raw accuracy rewards the majority
  class, so each carries balanced accuracy ``(correct-recall + wrong-recall) / 2`` (a constant: 0.5)
  and wrong-recall ``P(verdict "wrong" | attempt wrong)`` (always "correct": 0, always "wrong": 1).
  A verdict that could not be parsed counts as wrong, as in PAG's own metrics.
* **Coach (MLMT)** (:func:`coach_baselines`): the coach alone (its own boxed answer in turn 2) and a
  solver that copies it (turn 3 := the coach's answer, the solver's turn-1 answer when the coach gave
  none), against the trained solver's turn 3, all on the same episodes.

Everything is computed from ``predictions.jsonl`` lines the evaluator already wrote.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Iterable, Optional, Sequence

from satseq.config.schema import RolloutConfig, update_only_keys
from satseq.utils.stats import mean_se

WARM_STAGE = 0


# ------------------------------------------------------------------------------------ verifier
def judged_attempts(row: dict) -> Iterable[tuple[bool, Optional[str]]]:
    """(judged attempt correct, verdict) for every verifier turn of a ``self_verify`` prediction line.

    Verifier turn j judges the policy turn before it; its correctness is known for the first attempt
    (``turn1_correct``) and the last (``correct``); an attempt in between is judged right or wrong
    from a parsed verdict and whether it was right (skipped when the verdict is missing)."""
    for s, roles in enumerate(row["pag_roles"]):
        n_policy = sum(r == "policy" for r in roles)
        attempt, j = 0, 0
        for role in roles:
            if role == "policy":
                attempt += 1
                continue
            verdict = row["verdicts"][s][j] if j < len(row["verdicts"][s]) else None
            right = row["verifier_correct"][s][j]
            j += 1
            if attempt == 1:
                yield bool(row["turn1_correct"][s]), verdict
            elif attempt == n_policy:
                yield bool(row["correct"][s]), verdict
            elif verdict is not None:
                yield (verdict == "correct") == bool(right), verdict


def verifier_stats(pairs: Sequence[tuple[bool, Optional[str]]]) -> dict:
    """Accuracy, correct- and wrong-recall and balanced accuracy of verdicts on judged attempts."""
    right = [v for a, v in pairs if a]
    wrong = [v for a, v in pairs if not a]
    cr = sum(v == "correct" for v in right) / len(right) if right else None
    wr = sum(v == "wrong" for v in wrong) / len(wrong) if wrong else None
    acc = (sum(v == "correct" for v in right) + sum(v == "wrong" for v in wrong)) / len(pairs) if pairs else None
    bal = (cr + wr) / 2 if cr is not None and wr is not None else None
    return {"accuracy": acc, "balanced_accuracy": bal, "correct_recall": cr, "wrong_recall": wr,
            "n": len(pairs), "n_wrong": len(wrong)}


def verifier_baselines(rows: Sequence[dict]) -> dict:
    """The trained verifier and the two constant verifiers on the same judged attempts."""
    pairs = [p for r in rows for p in judged_attempts(r)]
    return {"trained": verifier_stats(pairs),
            "always_correct": verifier_stats([(a, "correct") for a, _ in pairs]),
            "always_wrong": verifier_stats([(a, "wrong") for a, _ in pairs])}


# --------------------------------------------------------------------------------------- coach
def coach_baselines(rows: Sequence[dict]) -> dict:
    """The coach alone and copying the coach's answer, per problem then mean ± s.e. over problems."""
    alone, copy = [], []
    for r in rows:
        alone.append(sum(map(bool, r["coach_correct"])) / len(r["coach_correct"]))
        copied = [bool(c) if a is not None else bool(t1)
                  for a, c, t1 in zip(r["coach_answers"], r["coach_correct"], r["turn1_correct"])]
        copy.append(sum(copied) / len(copied))
    return {"coach_alone": mean_se(alone), "copy_coach": mean_se(copy)}


def summarize_eval(metrics: dict, rows: Sequence[dict], k: int) -> dict:
    """What the comparison keeps of one evaluation: accuracy and pass@k (mean ± s.e. over problems),
    maj@k for one policy answering alone (the majority of k samples; ties: odd k the first, even k the
    eval seed's stream, :func:`~satseq.eval.metrics.vote_of`), and the
    workflow's trivial baselines (verifier or coach) when it has them."""
    from satseq.eval.predictions_io import problem_key

    seen, uniq = set(), []
    for r in rows:  # the evaluator's rule: the first line of a problem counts
        key = problem_key(r.get("problem_id"))
        if key not in seen:
            seen.add(key)
            uniq.append(r)
    out = {"workflow": metrics.get("workflow"), "accuracy": metrics["accuracy"], "k": k,
           "pass@k": metrics.get(f"pass@{k}"), "n_problems": metrics.get("n_problems"), "n": metrics.get("n")}
    seats = len((uniq[0].get("agent_answers") or [[]])[0]) if uniq else 0  # a relay's turns per episode
    alone = out["workflow"] == "single" or (out["workflow"] == "relay" and seats == 1)  # not one policy in 3 seats
    if alone:  # one policy answering alone, scored by the vote of k samples: a relay of k seats' fair rival
        out["maj@k"] = metrics.get(f"maj@{k}")
    if out["workflow"] == "self_verify":
        out["verifier"] = verifier_baselines(uniq)
        out["turn1"] = metrics["turn1"]["accuracy"]
    elif out["workflow"] == "coach":
        out["coach"] = coach_baselines(uniq)
        out["turn1"] = metrics["turn1"]["accuracy"]
    elif out["workflow"] == "code_answer":  # two seats an episode: no one-policy vote; the coder's seat instead
        out["turn1"] = metrics["coder"]["accuracy"]
    return out


# ----------------------------------------------------------------------------------- warm start
def _warm_sources(run_dir: Path) -> Optional[tuple[dict, object, list[str], list[Path]]]:
    """run_info, config, agent names and each agent's starting model (None for a LoRA run)."""
    from satseq.config import load_config
    from satseq.envs.tasks import warm_start_for
    from satseq.models.loading import resolve_model_source
    from satseq.models.warm_start import EMBEDDED
    from satseq.registry import get_method

    info = json.loads((run_dir / "run_info.json").read_text(encoding="utf-8"))
    if info.get("mode") not in ("full", "lora"):
        return None
    cfg = load_config(run_dir / "train_config.yaml", [], saved=True)
    method = get_method(cfg.method)
    spec = method.agents(cfg)
    if list(spec.names) != list(info["agents"]):
        return None
    if info["mode"] == "lora":  # the adapters are written by warm_start_run; keyed by the base and paths
        return info, cfg, list(spec.names), [Path(str(resolve_model_source(cfg.model.path)))] + \
            [Path(str(p)) for p in spec.paths if p]
    sources = []
    for p in (p or cfg.model.path for p in spec.paths):
        if p == EMBEDDED:
            src = warm_start_for(cfg.data.embedded_task, method.environment(cfg), cfg.output_dir, show_progress=False,
                                 console=lambda *a: None)
        else:
            src = resolve_model_source(p)
        if not Path(str(src)).is_dir():
            return None
        sources.append(Path(str(src)).resolve())
    return info, cfg, list(spec.names), sources


# rollout settings marked update-only in the schema (the engine importance weight: it weights the
# update, never what is generated): runs differing only in them share one warm-start evaluation
UPDATE_ONLY_ROLLOUT_KEYS = update_only_keys(RolloutConfig)
# run_info's record of how the engine was chosen (a fresh probe, the probe's cache, a resumed run's
# choice) and the probe's speeds: not what the engine generates (engine, dtype, gemm are), so a resumed
# run shares its cell's warm start
ROLLOUT_BOOKKEEPING = ("source", "speeds")


def _digest(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:10]


def _prompting(cfg) -> dict:
    """What turns a problem into the first prompt: two runs that differ in it start from different policies
    in effect (a few-shot template is part of the policy a warm-start row evaluates)."""
    return {"template": cfg.data.prompt_template, "chat_template": cfg.model.chat_template}


def _saved_prompting(run_dir: Path) -> dict:
    from satseq.config import load_config

    return _prompting(load_config(run_dir / "train_config.yaml", [], saved=True))


def _evaluated_otherwise(eval_dir: Path, prompt: dict) -> bool:
    """Whether a kept evaluation of a directory not rebuilt yet (a restored study) was prompted with another
    few-shot template: its first prompt lacks the text this template puts before the problem."""
    preds = eval_dir / "predictions.jsonl"
    template = prompt["template"] or ""
    if "{problem}" not in template or not preds.is_file():
        return False
    with preds.open(encoding="utf-8") as f:
        first = f.readline()
    try:
        shown = json.loads(first).get("prompt") or ""
    except json.JSONDecodeError:
        return False
    return template.split("{problem}")[0] not in shown


def warm_start_run(run_dir: Path, out: Path) -> Optional[Path]:
    """The stage-0 run directory of ``run_dir``'s warm start under ``out/baselines`` (made once,
    atomically; shared by runs with the same start, workflow, prompting and sampling settings), or None
    where its start cannot be rebuilt. Prompting: the first prompt's template and chat template (the
    method's own turn prompts are in ``workflow_options``)."""
    from satseq.config import dump_config
    from satseq.registry import get_method
    from satseq.utils.io import write_json

    found = _warm_sources(Path(run_dir))
    if found is None:
        return None
    info, cfg, names, sources = found
    method = get_method(cfg.method)
    env = method.environment(cfg)
    workflow = env.name
    d = dump_config(cfg)
    key = {"workflow": workflow, "agents": names, "sources": [str(s) for s in sources],
           "info": {k: v for k, v in info.items() if k not in ("method", "versions", "ray", "rollout")},
           "engine": {k: v for k, v in (info.get("rollout") or {}).items() if k not in ROLLOUT_BOOKKEEPING},
           "rollout": {k: v for k, v in (d.get("rollout") or {}).items() if k not in UPDATE_ONLY_ROLLOUT_KEYS},
           "options": env.workflow_options(cfg),
           # previous_template only when set: the keys (directory names) of studies made before it stay
           "show_previous": [cfg.sat_seq.show_previous, cfg.sat_seq.previous_budget]
           + ([cfg.sat_seq.previous_template] if cfg.sat_seq.previous_template is not None else [])}
    # the key without the prompting names the directory of the first run to come with it (so the
    # directories and evaluations of studies made before the prompting joined the key keep their names);
    # a run prompted otherwise gets the key with its prompting
    prompt = _prompting(cfg)
    final = Path(out) / "baselines" / f"warm_start_{workflow}_{_digest(key)}"
    made = (final / "run_info.json").is_file()
    if _saved_prompting(final) != prompt if made else _evaluated_otherwise(Path(out) / "evals" / final.name, prompt):
        final = final.with_name(f"warm_start_{workflow}_{_digest({**key, 'prompt': prompt})}")
        made = (final / "run_info.json").is_file()
    if made:
        return final
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    write_json(tmp / "run_info.json", {**info, "warm_start_of": str(run_dir)})
    shutil.copy2(Path(run_dir) / "train_config.yaml", tmp / "train_config.yaml")
    if info["mode"] == "lora":
        _save_start_adapters(cfg, names, method, tmp)
    else:
        for name, src in zip(names, sources):
            os.symlink(src, tmp / f"{name}_stage_{WARM_STAGE}", target_is_directory=True)
    shutil.rmtree(final, ignore_errors=True)  # a torn earlier attempt
    os.replace(tmp, final)
    return final


def _save_start_adapters(cfg, names: list[str], method, into: Path) -> None:
    """Each agent's starting LoRA adapter, built as the run built it, as ``<agent>_stage_0`` in ``into``
    (a fresh adapter has B = 0: the policy is the base model's whatever A's random draw)."""
    import torch

    from satseq.runtime import build_pool

    torch.manual_seed(cfg.seed)
    spec = method.agents(cfg)
    pool = build_pool(cfg, names, list(spec.paths), "cpu", lambda *a, **k: None, path_keys=spec.path_keys,
                      force_lora=spec.force_lora, env=method.environment(cfg))
    for name in names:
        pool.save_agent(name, into / f"{name}_stage_{WARM_STAGE}")
