"""Metrics over ``predictions.jsonl`` lines and the table ``satseq eval`` prints.

:func:`compute_metrics` aggregates every workflow's lines (single, relay, MLMT ``coach``, PAG
``self_verify``, the tool user → answerer ``code_answer``); :func:`print_table` shows them. Split
from :mod:`satseq.eval.runner`, which runs the evaluation.
"""
from __future__ import annotations

import math
from typing import Sequence

from satseq.errors import DataError
from satseq.eval.metrics import summarize
from satseq.eval.predictions_io import problem_key


def _flatten(x) -> list:
    out = []
    for v in x:
        out.extend(_flatten(v) if isinstance(v, list) else [v])
    return out


def compute_metrics(rows: list[dict], ks: Sequence[int], seed: int) -> dict:
    """Overall metrics over prediction lines (duplicates of a problem_id: the first line counts).

    ``seed`` is the evaluation's (``inference_config.yaml``): with each line's ``problem_id`` it seeds
    the stream that breaks the ties of maj@k for an even k (:func:`~satseq.eval.metrics.vote_of`).

    Top level: the final answer (single: the model's; relay: the vote) — ``accuracy`` (mean
    correctness of all samples = avg@n), ``pass@k``, ``avg@k``, ``maj@k``, each ``{"mean", "se"}``.
    Relay runs add ``vote`` (the same figures) and ``agents`` (each agent's own answers). ``code_answer``
    runs (two seats an episode: the coder's program, then the answerer) add ``coder`` (its program printed
    the answer) and ``final`` (the answerer's); their maj@k votes over k *episodes*, 2k generated turns.
    """
    seen, uniq = set(), []
    for r in rows:
        k = problem_key(r.get("problem_id"))
        if k not in seen:
            seen.add(k)
            uniq.append(r)
    if not uniq:
        raise DataError("no predictions to compute metrics from")
    n_min = min(len(r["correct"]) for r in uniq)
    ks = [k for k in sorted(set(ks)) if k <= n_min]

    def block(per_problem):
        for p, r in zip(per_problem, uniq):  # a problem graded by a named scorer votes by its verdicts
            if r.get("scorer"):
                p["scorer"] = r["scorer"]
        s = summarize(per_problem, ks, seed=seed)
        acc = [sum(p["correct"]) / len(p["correct"]) for p in per_problem]
        mean = sum(acc) / len(acc)
        se = (math.sqrt(sum((a - mean) ** 2 for a in acc) / (len(acc) - 1)) / math.sqrt(len(acc))
              if len(acc) > 1 else None)
        return {"accuracy": {"mean": mean, "se": se}, **s}

    final = block([{"correct": [float(c) for c in r["correct"]], "answers": r["answers"], "gold": r["answer"],
                    "problem_id": r.get("problem_id")}
                   for r in uniq])
    kind = ("self_verify" if "verdicts" in uniq[0] else "coach" if "turn1_correct" in uniq[0]
            else "code_answer" if "output_correct" in uniq[0] else "relay" if "agents" in uniq[0] else "single")
    out: dict = {"workflow": kind, "ks": ks, **final}
    reasons: dict[str, int] = {}
    for r in uniq:
        for f in _flatten(r.get("finish_reasons", [])):
            reasons[f] = reasons.get(f, 0) + 1
    total = sum(reasons.values())
    out["finish_reasons"] = reasons
    out["truncated_fraction"] = reasons.get("length", 0) / total if total else 0.0
    if kind == "self_verify":
        out["final"] = dict(final)
        out["turn1"] = block([{"correct": [float(c) for c in r["turn1_correct"]], "answers": r["turn1_answers"],
                               "gold": r["answer"], "problem_id": r.get("problem_id")} for r in uniq])
        v = [c for r in uniq for s in r["verifier_correct"] for c in s]
        revised = [x for r in uniq for x in r["revised"]]
        changed = [x for r in uniq for x in r["answer_changed"]]
        out["verifier_accuracy"] = sum(v) / len(v) if v else None
        out["revision_rate"] = sum(revised) / len(revised)
        out["answer_change_ratio"] = (sum(c for c, rv in zip(changed, revised) if rv) / sum(revised)
                                      if any(revised) else None)
    if kind == "coach":
        out["turn3"] = dict(final)
        out["turn1"] = block([{"correct": [float(c) for c in r["turn1_correct"]], "answers": r["turn1_answers"],
                               "gold": r["answer"], "problem_id": r.get("problem_id")} for r in uniq])
        pairs = [(a, b) for r in uniq for a, b in zip(r["turn1_correct"], r["correct"])]
        wrong1, right1 = sum(not a for a, _ in pairs), sum(a for a, _ in pairs)
        out["improvement_rate"] = sum((not a) and b for a, b in pairs) / wrong1 if wrong1 else None
        out["degradation_rate"] = sum(a and not b for a, b in pairs) / right1 if right1 else None
        out["coach_accuracy"] = sum(c for r in uniq for c in r["coach_correct"]) / len(pairs)
    if kind == "code_answer":
        out["final"] = dict(final)
        out["coder"] = block([{"correct": [float(c) for c in r["output_correct"]], "answers": r["answers"],
                               "gold": r["answer"], "problem_id": r.get("problem_id")} for r in uniq])
    if kind == "relay":
        out["vote"] = dict(final)
        agents = uniq[0]["agents"]
        out["agents"] = {}
        for i, name in enumerate(agents):
            out["agents"][name] = block([
                {"correct": [float(s[i]) for s in r["agent_correct"]], "answers": [s[i] for s in r["agent_answers"]],
                 "gold": r["answer"], "problem_id": r.get("problem_id")} for r in uniq])
    return out


def _fmt(v: dict | None) -> str:
    if not v:
        return "-"
    se = v.get("se")
    return f"{v['mean']:.3f}" + (f" ± {se:.3f}" if se is not None else "")


# multi-turn workflows: (column titles, metric blocks, extra rows (label, metric, column))
TWO_COLUMNS = {
    "coach": (("turn 1", "turn 3"), ("turn1", "turn3"),
              [("improvement (wrong→right)", "improvement_rate", 1), ("degradation (right→wrong)", "degradation_rate", 1),
               ("coach accuracy", "coach_accuracy", 0)]),
    "self_verify": (("Acc@t1", "Acc@final"), ("turn1", "final"),
                    [("verifier accuracy", "verifier_accuracy", 1), ("revision rate", "revision_rate", 1),
                     ("answer change ratio", "answer_change_ratio", 1)]),
    "code_answer": (("coder's program printed the answer", "answerer"), ("coder", "final"), []),
}


def print_table(metrics: dict, title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    table.add_column("metric")
    keys = ["accuracy"] + [f"{kind}@{k}" for kind in ("pass", "avg", "maj") for k in metrics["ks"]]
    if metrics["workflow"] == "relay":
        cols = list(metrics["agents"]) + ["vote"]
        for c in cols:
            table.add_column(c, justify="right")
        for key in keys:
            table.add_row(key, *[_fmt((metrics["agents"].get(c) if c != "vote" else metrics["vote"]).get(key))
                                 for c in cols])
    elif metrics["workflow"] in TWO_COLUMNS:
        (first, last), (k1, k2), extra = TWO_COLUMNS[metrics["workflow"]]
        table.add_column(first, justify="right")
        table.add_column(last, justify="right")
        for key in keys:
            table.add_row(key, _fmt(metrics[k1].get(key)), _fmt(metrics[k2].get(key)))
        for label, name, col in extra:
            v = "-" if metrics[name] is None else f"{metrics[name]:.3f}"
            table.add_row(label, *((v, "") if col == 0 else ("", v)))
    else:
        table.add_column("mean ± se", justify="right")
        for key in keys:
            table.add_row(key, _fmt(metrics.get(key)))
    Console(soft_wrap=True).print(table)
