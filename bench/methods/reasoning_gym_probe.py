"""The base SmolLM2-135M-Instruct on reasoning-gym tasks, in one pass and with the Python tool: accuracy with
its s.e., greedy and T = 1, the tool-call rate and the share of calls that ran.

    python bench/methods/reasoning_gym_probe.py [--problems 50] [--max_new_tokens 128] [--threads 1]
        [--tasks 'reasoning_gym:chain_sum?min_terms=2&max_terms=2' ...] [--modes one_pass tool tool_instructed]
        [--temperatures 0 1] [--out DIR]

Each cell is what a run would see at its first stage, built as a run builds it (``satseq.runtime.build_runtime``
of ``method=grpo model.path=smollm2``, LoRA adapters at zero: the base model; ``rollout.dtype=float32``):

* ``one_pass``: ``env.name=single`` -- the chat template with the ``\\boxed{}`` instruction
  (``data.prompt_template=boxed``), one response;
* ``tool``: ``env.name=tool_use`` -- the same problem under the tool environment's system prompt (how to run
  Python in a fenced block, then answer in a box; SmolLM2's template renders no tools, so the
  ``python_block`` parser), up to ``--max_turns`` turns and ``--max_tool_calls`` sandboxed runs, each
  program's output shown to the model as a tool message;
* ``tool_instructed``: the same, the user message also asking for a one-line program first and the boxed
  answer after its output (:data:`INSTRUCTED_TEMPLATE`).

The problems are the first ``--problems`` of each task's held-out split (``data.eval=<task>``: reasoning-gym's
``create_dataset`` at the spec's seed). The final answer (the last ``\\boxed{}``, else the answer phrase) is
graded by the generator's own scorer (:func:`satseq.rewards.scorers.grade`; right = a score of 1). The
environment's ``held_out_rollout`` plays the episodes (one per problem, its own random stream, torch seed 0).

Per cell: accuracy ± s.e. (sample s.d., ddof 1, / sqrt(n)); for ``tool``: the share of episodes with at least
one tool call (``called``), tool calls per episode, and the share of calls whose program ran without an error
or timeout (``ran``; of the calls run: a call past the budget is answered without running), the share of episodes in which some program printed the right answer (``printed
right``: the printed text graded by the same scorer: what the tool could give, answered or not); ``answered``: the share of episodes that ended with a turn without a call. One JSON file
per cell (the metrics and every episode's turns) and ``table.json`` / ``table.md`` go to ``--out``; a cell
already there is read back, not run again (a killed probe resumes).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TASKS = [
    "reasoning_gym:chain_sum?min_terms=3&max_terms=3&min_digits=2&max_digits=2&held_out=0",
    "reasoning_gym:basic_arithmetic?min_terms=3&max_terms=3&min_digits=2&max_digits=2&held_out=0",
    "reasoning_gym:letter_counting?min_words=3&max_words=5&held_out=0",
    "reasoning_gym:number_sorting?min_numbers=3&max_numbers=4&max_decimals=0&held_out=0",
    "reasoning_gym:gcd?min_numbers=2&max_numbers=2&min_value=1&max_value=100&held_out=0",
]


def mean_se(xs: list[float]) -> tuple[float, float | None]:
    """(mean, s.e.) of :func:`~satseq.utils.stats.mean_se`."""
    from satseq.utils.stats import mean_se as _mean_se

    r = _mean_se(xs)
    return r["mean"], r["se"]


def cell_name(spec: str, mode: str, temperature: float) -> str:
    task = spec.removeprefix("reasoning_gym:").split("?")[0]
    return f"{task}_{mode}_T{temperature:g}"


#: ``tool_instructed``: the problem's user message asks for the program first (``data.prompt_template``); the
#: system message is the tool environment's own, as for ``tool``
INSTRUCTED_TEMPLATE = ("{problem}\nFirst write one line of Python in a ```python block that prints the answer. "
                       "After you see what it printed, give the answer as \\boxed{answer}.")
MODES = ("one_pass", "tool", "tool_instructed")


def config_overrides(spec: str, mode: str, temperature: float, args) -> list[str]:
    env = ["env.name=tool_use", f"env.max_turns={args.max_turns}", f"env.tool_use.max_tool_calls={args.max_tool_calls}"] \
        if mode != "one_pass" else ["env.name=single"]
    if mode == "tool_instructed":
        env.append(f"data.prompt_template={json.dumps(INSTRUCTED_TEMPLATE)}")
    return ["method=grpo", "model.path=smollm2", "model.lora.enabled=true", "rollout.dtype=float32",
            f"data.train={spec}", f"data.eval={spec}", "data.train_size=1", f"data.eval_size={args.problems}",
            f"rollout.max_new_tokens={args.max_new_tokens}", f"rollout.temperature={temperature}",
            "rollout.top_p=1.0", f"threads={args.threads}", f"output_dir={args.out / 'runs'}",
            f"run_name={cell_name(spec, mode, temperature)}", "trainer.tensorboard=false"] + env


def call_ran(result: str) -> bool:
    from satseq.envs.tool_use.session import BUDGET_SPENT, TIMEOUT_MARK

    return not (result.startswith("error:") or "\nerror:" in result or TIMEOUT_MARK in result or result == BUDGET_SPENT)


def summarize(episodes: list[dict], mode: str) -> dict:
    from satseq.envs.tool_use.session import BUDGET_SPENT

    acc = [float(e["correct"]) for e in episodes]
    m, se = mean_se(acc)
    out = {"n": len(acc), "accuracy": m, "accuracy_se": se,
           "answer_found": sum(e["prediction"] is not None for e in episodes) / len(episodes),
           "tokens_per_episode": sum(e["tokens"] for e in episodes) / len(episodes)}
    if mode != "one_pass":
        called = [float(bool(e["calls"])) for e in episodes]
        results = [r for e in episodes for r in e["results"]]
        executed = [r for r in results if not r.startswith(BUDGET_SPENT)]  # a call past the budget is not run
        ran = [float(call_ran(r)) for r in executed]
        out.update({"called": mean_se(called)[0], "called_se": mean_se(called)[1],
                    "calls_per_episode": sum(len(e["calls"]) for e in episodes) / len(episodes),
                    "calls_ran": (sum(ran) / len(ran)) if ran else None, "calls": len(results),
                    "calls_executed": len(executed),
                    "answered": sum(e["stop"] == "answered" for e in episodes) / len(episodes),
                    "accuracy_when_called": (sum(a for a, c in zip(acc, called) if c) / sum(called)) if sum(called) else None,
                    "accuracy_when_ran": _accuracy_when_ran(episodes),
                    "output_correct": sum(e["output_correct"] for e in episodes) / len(episodes)})
    return out


def _accuracy_when_ran(episodes: list[dict]):
    hit = [float(e["correct"]) for e in episodes if any(call_ran(r) for r in e["results"])]
    return (sum(hit) / len(hit)) if hit else None


def run_cell(spec: str, mode: str, temperature: float, args) -> dict:
    import torch

    from satseq.config import load_config
    from satseq.registry import get_method
    from satseq.rewards.scorers import grade
    from satseq.rewards.turn_rewards import grade_episodes
    from satseq.runtime import build_runtime

    cfg = load_config(None, config_overrides(spec, mode, temperature, args))
    method = get_method(cfg.method)
    rt = build_runtime(cfg, method, console=lambda *a: None)
    env = method.environment(rt.cfg)
    workflow = env.make_workflow(rt.cfg, method.roles(rt.cfg, rt.pool.names), rt.fmt, rt.sampling,
                                 options={"journal": False} if mode != "one_pass" else None)
    t0 = time.perf_counter()
    episodes = workflow.rollout(rt.eval, rt.pool, rt.engine, group_size=1,
                                generator=torch.Generator().manual_seed(0))
    seconds = time.perf_counter() - t0
    grade_episodes(episodes)
    rows = []
    for ep in episodes:
        results = [r for t in ep.turns for r in t.info.get("tool_results", [])]
        rows.append({"output_correct": any(call_ran(r) and grade(r.strip(), ep.problem)[0] for r in results),"problem_id": ep.problem.problem_id, "answer": ep.problem.answer, "prediction": ep.prediction,
                     "correct": bool(ep.prediction_correct), "stop": ep.info.get("stop"),
                     "tokens": sum(len(t.response_ids) for t in ep.turns),
                     "calls": [c for t in ep.turns for c in t.info.get("tool_calls", [])],
                     "results": results,
                     "responses": [t.text for t in ep.turns]})
    return {"task": spec, "mode": mode, "temperature": temperature, "seconds": seconds,
            "settings": config_overrides(spec, mode, temperature, args),
            "metrics": summarize(rows, mode), "episodes": rows}


def _fmt(m, se=None, digits=2) -> str:
    if m is None:
        return "–"
    return f"{m:.{digits}f}" + (f" ± {se:.{digits}f}" if se is not None else "")


def table(cells: list[dict], temperatures: list[float]) -> str:
    modes = [m for m in MODES if any(c["mode"] == m for c in cells)]
    tools = [m for m in modes if m != "one_pass"]
    head = ["task"] + [f"{mode} T={t:g}" for t in temperatures for mode in modes] + \
        [f"{mode} T={t:g}: called / ran / printed right" for t in temperatures for mode in tools]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    by = {(c["task"], c["mode"], c["temperature"]): c["metrics"] for c in cells}
    for task in dict.fromkeys(c["task"] for c in cells):
        row = [task.removeprefix("reasoning_gym:").replace("&held_out=0", "").replace("?held_out=0", "")]
        for t in temperatures:
            for mode in modes:
                m = by.get((task, mode, t))
                row.append(_fmt(m["accuracy"], m["accuracy_se"]) if m else "–")
        for t in temperatures:
            for mode in tools:
                m = by.get((task, mode, t))
                row.append(f"{_fmt(m['called'])} / {_fmt(m['calls_ran'])} / {_fmt(m['output_correct'])}" if m else "–")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=int, default=50, help="held-out problems per task")
    ap.add_argument("--max_new_tokens", type=int, default=128, help="tokens per turn")
    ap.add_argument("--max_turns", type=int, default=3, help="tool: turns per episode")
    ap.add_argument("--max_tool_calls", type=int, default=2, help="tool: sandboxed runs per episode")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tasks", nargs="+", default=TASKS, help="reasoning_gym:<name>?... specs (quote them)")
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    ap.add_argument("--temperatures", nargs="+", type=float, default=[0.0, 1.0])
    ap.add_argument("--out", type=Path, default=ROOT / "outputs" / "reasoning_gym_probe")
    ap.add_argument("--report", action="store_true", help="only read the cells already in --out (run none)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    args.out = args.out.resolve()
    (args.out / "cells").mkdir(parents=True, exist_ok=True)
    cells = []
    for spec in args.tasks:
        for t in args.temperatures:
            for mode in args.modes:
                f = args.out / "cells" / f"{cell_name(spec, mode, t)}.json"
                if f.is_file():
                    cell = json.loads(f.read_text())
                    cell["metrics"] = summarize(cell["episodes"], mode)  # this script's metrics, from its episodes
                elif args.report:
                    continue
                else:
                    cell = run_cell(spec, mode, t, args)
                    f.write_text(json.dumps(cell, indent=1) + "\n")
                m = cell["metrics"]
                extra = (f"  printed right {m['output_correct']:.2f}  called {m['called']:.2f}  calls/ep {m['calls_per_episode']:.2f}  ran {_fmt(m['calls_ran'])}"
                         f"  answered {m['answered']:.2f}") if mode != "one_pass" else ""
                print(f"{cell_name(spec, mode, t):>40}  acc {_fmt(m['accuracy'], m['accuracy_se'], 3)}  "
                      f"found {m['answer_found']:.2f}  tok/ep {m['tokens_per_episode']:.0f}{extra}  "
                      f"({cell['seconds']:.0f} s)", flush=True)
                cells.append(cell)
    (args.out / "table.json").write_text(json.dumps(
        [{k: c[k] for k in ("task", "mode", "temperature", "seconds", "metrics")} for c in cells], indent=1) + "\n")
    md = table(cells, args.temperatures)
    (args.out / "table.md").write_text(md + "\n")
    print(md)


if __name__ == "__main__":
    main()
