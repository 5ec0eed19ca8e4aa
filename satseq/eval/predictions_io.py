"""``predictions.jsonl`` of ``satseq eval``: its lines, and the bookkeeping that makes a run resumable.

- :func:`records`: one prediction line per problem from a chunk's graded episodes (the fields are
  listed in :mod:`satseq.eval.runner`'s docstring);
- :func:`read_existing`: the complete lines already written (a torn last line from a killed run is
  cut off the file, so appends start on a fresh line);
- :func:`check_same_config` / :func:`check_same_problems`: refuse to resume into output made with
  a different configuration (:data:`IDENTITY_KEYS` of ``inference_config.yaml``) or for different
  problems under the same ids;
- :func:`problem_key`: the canonical key of a ``problem_id`` that resuming and the metrics dedupe on.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from satseq.errors import SatseqError
from satseq.eval.metrics import problem_metrics, vote_of
from satseq.eval.targets import Target
from satseq.utils.io import read_jsonl, write_jsonl
from satseq.records import Problem

PREDICTIONS = "predictions.jsonl"
CONFIG_FILE = "inference_config.yaml"
METRICS_FILE = "metrics.json"
#: The fields of inference_config.yaml that must match to resume into an existing output dir.
IDENTITY_KEYS = ("model", "stage", "agents", "workflow", "prompt_format", "dataset", "split", "n",
                 "temperature", "top_p", "max_new_tokens", "stop", "seed")


def problem_key(pid: Any) -> str:
    return json.dumps(pid, sort_keys=True, default=str)


# ---------------------------------------------------------------------------------- resuming
def read_existing(out_dir: Path) -> list[dict]:
    """Complete lines of predictions.jsonl; a torn last line (killed run) is cut off the file."""
    path = out_dir / PREDICTIONS
    if not path.exists():
        return []
    rows = read_jsonl(path, allow_partial_last_line=True)
    raw = path.read_bytes()
    if raw and not raw.endswith(b"\n"):
        write_jsonl(path, rows)  # drop the partial line so appends start on a fresh line
    return rows


def check_same_config(out_dir: Path, config: dict, rows: list[dict]) -> None:
    if not rows:
        return
    cfg_path = out_dir / CONFIG_FILE
    if not cfg_path.is_file():
        raise SatseqError(f"{out_dir / PREDICTIONS} exists without {CONFIG_FILE}, so it cannot be resumed safely: "
                          "use another --output_dir or delete it")
    import yaml

    try:
        old = yaml.safe_load(cfg_path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as e:
        raise SatseqError(f"{cfg_path}: unreadable ({type(e).__name__}); use another --output_dir or delete it") from None
    diffs = []
    for k in IDENTITY_KEYS:
        a, b = old.get(k), config.get(k)
        if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
            a, b = list(a or []), list(b or [])
        if a != b:
            diffs.append(f"{k}: {a!r} -> {b!r}")
    if diffs:
        raise SatseqError(f"{out_dir} holds predictions made with a different config ({'; '.join(diffs)}): "
                          "use another --output_dir, or delete it to start over")


def check_same_problems(out_dir: Path, rows: list[dict], problems: list[Problem]) -> None:
    by_key = {problem_key(p.problem_id): p for p in problems}
    for r in rows:
        p = by_key.get(problem_key(r.get("problem_id")))
        if p is not None and (str(r.get("answer")) != str(p.answer) or r.get("problem") != p.problem):
            raise SatseqError(f"{out_dir / PREDICTIONS}: problem_id {r.get('problem_id')!r} has a different "
                              "problem or answer than the dataset now: use another --output_dir or delete it")


# -------------------------------------------------------------------------------- per problem
def _k_dict(metrics: dict, kind: str, ks: Sequence[int]) -> dict:
    return {str(k): metrics[f"{kind}@{k}"] for k in ks if f"{kind}@{k}" in metrics}


def records(target: Target, problems: list[Problem], episodes, n: int, ks: Sequence[int], seed: int) -> list[dict]:
    """One prediction line per problem; ``seed`` (the evaluation's) seeds the stream that breaks the ties
    of a vote over an even number of samples (:func:`~satseq.eval.metrics.vote_of`)."""
    from satseq.rewards.grade import is_equivalent
    from satseq.rewards.scorers import DEFAULT_SCORER, get_scorer, scorer_name

    owner = target.env  # the environment it ran in: its answers and fields
    out = []
    for g, p in enumerate(problems):
        eps = episodes[g * n:(g + 1) * n]
        assert all(ep.group == g for ep in eps)
        gold = str(p.answer)
        tie_seed = (int(seed), p.problem_id)
        scorer = scorer_name(p)  # a named scorer (reasoning-gym's): its vote groups and judges (metrics.py)
        same = is_equivalent if scorer == DEFAULT_SCORER else get_scorer(scorer).same
        rec: dict = {"problem_id": p.problem_id, "problem": p.problem, "prompt": eps[0].turns[0].prompt_text,
                     "answer": gold}
        custom = owner.prediction_answers(eps) if owner is not None else None
        if custom is not None:  # the workflow's method says what its final answer is
            answers, correct = custom
            rec["predicted_answer"] = vote_of(answers, len(answers), same, tie_seed)
            rec["individual_answers"] = answers
        elif target.kind == "run":
            answers = [ep.prediction for ep in eps]
            correct = [bool(ep.prediction_correct) for ep in eps]
            rec["predicted_answer"] = answers[0]
            rec["individual_answers"] = [t.answer for t in eps[0].turns]
        else:
            answers = [ep.turns[0].answer for ep in eps]
            correct = [bool(ep.turns[0].correct) for ep in eps]
            rec["predicted_answer"] = vote_of(answers, len(answers), same, tie_seed)
            rec["individual_answers"] = answers
        m = problem_metrics(correct, ks, answers, gold, tie_seed=tie_seed,
                            scorer=None if scorer == DEFAULT_SCORER else scorer)
        rec["pass_at_k"] = _k_dict(m, "pass", ks)
        rec["avg_at_k"] = _k_dict(m, "avg", ks)
        rec["maj_at_k"] = _k_dict(m, "maj", ks)
        rec["answers"] = answers
        rec["correct"] = correct
        if scorer != DEFAULT_SCORER:
            rec["scorer"] = scorer
            if custom is None and target.kind != "run":  # one model's samples: each one's score in [0, 1]
                rec["scores"] = [ep.turns[0].info.get("score") for ep in eps]
        fields = owner.prediction_fields(eps) if owner is not None else None
        if fields is not None:
            rec.update(fields)
        elif target.kind == "run":
            rec["agents"] = list(target.agents)
            rec["votes"] = answers
            rec["agent_answers"] = [[t.answer for t in ep.turns] for ep in eps]
            rec["agent_correct"] = [[bool(t.correct) for t in ep.turns] for ep in eps]
            rec["responses"] = [[t.text for t in ep.turns] for ep in eps]
            rec["finish_reasons"] = [[t.finish_reason for t in ep.turns] for ep in eps]
        else:
            rec["responses"] = [ep.turns[0].text for ep in eps]
            rec["finish_reasons"] = [ep.turns[0].finish_reason for ep in eps]
        if p.meta.get("resolved_as"):
            rec["resolved_as"] = p.meta["resolved_as"]
        out.append(rec)
    return out
