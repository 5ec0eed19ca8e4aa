"""``satseq quickstart``: what three agents in sequence learn that one agent cannot, on a laptop CPU.

The task is the chain relay (``data.embedded_task=chain``, :mod:`satseq.data.relay_chain`): the sum of
three 3-digit numbers, which a team can split into stages (agent 1 adds ``a+b``, agent 2 adds ``c`` to
that, agent 3 copies or re-adds) while a single pass must carry every column of three operands at once.
The team is rewarded only for its vote (``reward.own=0``).

1. the warm start: the chain's, shipped with satseq and copied to ``<output_dir>/embedded``
   (built by ``satseq sft --task chain --ship``: the embedded tiny model, SFT to the base task's target,
   then SFT on the chain's transcripts to the chain's target; docs/embedded_default.md);
2. "before": that warm start as the three relay agents (their vote) and as one agent on a one-pass prompt;
3. SAT-Seq: three agents, block-coordinate updates, quantile-KL check, and the certificate (a PAC
   lower bound on the vote and on its improvement, δ = 0.05, from 256 fresh held-out episodes);
4. one shared policy (``method=shared_policy``): one model playing all three roles of the same relay,
   the same stages, prompts, group size and lr, so the same generated samples as SAT-Seq: the fair
   one-model baseline (what separate parameters add); read on the relay and alone in one pass;
5. GRPO: one agent on the one-pass prompt, the same stages, prompts per stage, group size and lr (a
   third of the relay's generated turns); read both alone and as all three relay agents;
6. a before/after table, also written to ``<output_dir>/quickstart/results.{json,md}``.

Steps 2–5 run in two processes with half of the machine's cores each: one evaluates the warm start and
then trains SAT-Seq, the other trains GRPO and then the shared policy (the two lanes take about as long;
the tiny model's runs are too small to use two cores well, so two side by side finish sooner than one
after another). Each piece is seeded and its own process, so what it computes does not depend on what
runs beside it. Each phase, and every 15 s of the trainings, prints the time left, from the times this
machine has measured (:mod:`satseq.quickstart_clock`).
Accuracies are sampled at temperature 1 (``EVAL_SAMPLES`` episodes per held-out problem).
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ProcessPoolExecutor, wait
from multiprocessing import get_context
from pathlib import Path
from typing import Optional

import torch

from satseq.config import load_config
from satseq.eval.rollout_eval import evaluate_relay, evaluate_single
from satseq.models.agents import AgentPool
from satseq.quickstart_clock import Progress, RunTrack, duration, seconds_left
from satseq.utils.children import end_with_parent
from satseq.utils.io import read_jsonl, write_json, write_text

AGENTS = ["agent_1", "agent_2", "agent_3"]
STAGES = 30
PRESET = [  # the quickstart budget; every key is an ordinary config key (bench/methods/multiagent_comparison.py's chain)
    "data.embedded_task=chain", "reward.own=0.0", "reward.team=1.0",
    f"trainer.num_stages={STAGES}", "trainer.train_batch_size=8", "trainer.save_every=0", "trainer.export_pt=false",
    "sat_seq.group_size=4", "grpo.group_size=4", "sat_seq.lr=3e-5", "ppo.lr=3e-5",
    "sat_seq.mini_batch_size=16", "ppo.mini_batch_size=16", "sat_seq.scheduler=random",
    "data.eval_size=150", "resume=false",
]
EVAL_SAMPLES = 2
REFERENCE_PROBLEMS = 200  # the held-out problems of the clock's reference times (data.eval_size)
#: the phases the quickstart announces, each with the time left (:mod:`satseq.quickstart_clock`)
PHASES = [("warm_starts", "the chain warm start (shipped with satseq: a copy), and this machine's rollout speed"),
          ("train", "{stages} stages of SAT-Seq (three agents) beside GRPO (one agent, one pass), then one shared "
                    "policy on the relay; the warm start evaluated first on {problems} held-out problems (two processes)"),
          ("sat_seq_eval", "SAT-Seq's three agents on the held-out problems"),
          ("shared_eval", "the shared policy on the relay and alone"),
          ("grpo_eval", "GRPO's policy alone and in all three seats")]
TAIL = ["sat_seq_eval", "shared_eval", "grpo_eval"]
#: the training runs: (config method, label); the lanes (processes) run their pieces in order, "before"
#: being the warm start's evaluation: the two lanes take about as long (SAT-Seq's stages cost about what
#: the shared policy's do; GRPO's a third)
RUNS = {"sat_seq": "SAT-Seq", "grpo": "GRPO", "shared_policy": "one shared policy"}
LANES = (("before", "sat_seq"), ("grpo", "shared_policy"))
POLL_S, REPORT_EVERY = 5, 3  # the trainings' metrics are read every 5 s, and reported every third time


class PhaseClock:
    """Prints each phase as it starts (``[2/5] ... · about 2 min 30 s left``), its time left from
    :func:`satseq.quickstart_clock.seconds_left` on ``progress``, and times the evaluations after the
    trainings (their measured pace rescales the ones still to come)."""

    def __init__(self, console, progress: Progress, phases=PHASES, **fill):
        self.console, self.progress, self.phases, self.fill = console, progress, phases, fill
        self.spent: dict[str, float] = {}
        self.estimates: list[tuple[float, float]] = []  # (seconds since the clock began, seconds left said)
        self._key: Optional[str] = None
        self._t0 = self.began = time.perf_counter()

    def left(self) -> str:
        """The time left, as printed; recorded with when it was said, so that a finished run shows how
        far each estimate was from the truth (results.json's ``timings_s.estimates``)."""
        left = seconds_left(self.progress)
        self.estimates.append((round(time.perf_counter() - self.began, 1), round(left, 1)))
        return f"about {duration(left)} left"

    def start(self, key: str) -> None:
        self.stop()
        i = next(n for n, (k, _) in enumerate(self.phases) if k == key)
        text = self.phases[i][1].format(**self.fill)
        self.console.print(f"[bold][{i + 1}/{len(self.phases)}][/bold] {text} · {self.left()}")
        self._key, self._t0 = key, time.perf_counter()

    def stop(self) -> None:
        if self._key is not None:
            self.spent[self._key] = time.perf_counter() - self._t0
            if self._key in self.progress.tail_left:  # an evaluation after the trainings: done, and its pace known
                self.progress.tail_left.remove(self._key)
                self.progress.tail_spent[self._key] = self.spent[self._key]
            self._key = None


ROWS = [("vote", "relay of three seats: the vote"), ("one_pass", "one agent, one pass")]
COLUMNS = [("before", "chain warm start"), ("sat_seq", "SAT-Seq: 3 agents"),
           ("shared_policy", "1 policy in the 3 seats"), ("grpo", "GRPO: 1 agent, 1 pass")]


def _quiet(*_args, **_kwargs) -> None:
    """A training lane's console: the parent reports its progress from the runs' metrics."""


def _lane_setup(threads: int) -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the checkpoints' "Writing model shards" bars
    torch.set_num_threads(threads)


def _train_lane(configs: list, threads: int) -> list[str]:
    """One process's share of the trainings, one after the other, on ``threads`` threads."""
    from satseq.loop import train

    _lane_setup(threads)
    return [str(train(cfg, console=_quiet)) for cfg in configs]


def _before_eval(cfg, gcfg, seed: int, threads: int) -> dict:
    """The warm start on the held-out problems, on ``threads`` threads: the three relay agents' vote
    (``cfg``'s relay) and one agent in one pass (``gcfg``'s prompt)."""
    from satseq.loop import build_run

    _lane_setup(threads)
    rt, grt = build_run(cfg, console=_quiet).rt, build_run(gcfg, console=_quiet).rt
    return {"vote": _vote(rt.pool, rt, seed), "one_pass": _one_pass(grt.pool, grt.pool.names[0], grt, seed)}


def _observe(progress: Progress, cfgs: dict) -> None:
    """Each run's stages logged so far, at the time its metrics.jsonl was last written."""
    for m, c in cfgs.items():
        path = Path(c.run_dir) / "metrics.jsonl"
        if path.exists():
            progress.runs[m].observe(_stages_done(c.run_dir), path.stat().st_mtime)


def _stages_done(run_dir: Path) -> int:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return 0
    return len({r["step"] for r in read_jsonl(path, allow_partial_last_line=True) if "step" in r})


class SideBySide:
    """The warm start's evaluation and the trainings of ``cfgs`` (method -> config): :data:`LANES` in two
    spawned processes with half of this process's threads each, started at once (in this process, one
    after the other, where it has one thread). :meth:`wait` prints the warm start's figures when they
    come, and every 15 s the stages each run has logged with the time left; it returns the warm start's
    figures and the run directories. A piece that fails raises there, with its own traceback."""

    def __init__(self, cfgs: dict, seed: int):
        self.cfgs, self.seed = cfgs, seed
        cores = torch.get_num_threads()  # this process's budget (OMP_NUM_THREADS, else the cores)
        self.lanes = [list(lane) for lane in LANES] if cores >= 2 else [[p for lane in LANES for p in lane]]
        self.threads = max(1, cores // len(self.lanes))
        self.pool, self.futures = None, {}
        if len(self.lanes) > 1:  # one lane (one thread): run here, in wait(), with no process to start
            ctx = get_context("spawn")  # a fresh interpreter: no OpenMP pool inherited from this process
            self.pool = ProcessPoolExecutor(max_workers=len(self.lanes), mp_context=ctx,
                                            initializer=end_with_parent, initargs=(os.getpid(),))
            # submitted in this order, two workers: one evaluates the warm start and then trains SAT-Seq,
            # the other trains GRPO and then the shared policy
            self.futures["before"] = self.pool.submit(_before_eval, cfgs["sat_seq"], cfgs["grpo"], seed, self.threads)
            self.futures["lane_b"] = self.pool.submit(_train_lane, [cfgs[m] for m in LANES[1]], self.threads)
            self.futures["lane_a"] = self.pool.submit(_train_lane, [cfgs[m] for m in LANES[0][1:]], self.threads)

    def close(self) -> None:
        """Stop the pieces still running (this process failed or was interrupted before they ended)."""
        if self.pool is None:
            return
        if not all(f.done() for f in self.futures.values()):
            for proc in list(getattr(self.pool, "_processes", {}).values()):
                proc.terminate()
        self.pool.shutdown(wait=False, cancel_futures=True)

    def wait(self, con, progress: Progress, clock: "PhaseClock") -> tuple[dict, dict[str, Path]]:
        if self.pool is None:
            from satseq.loop import train

            before = _before_eval(self.cfgs["sat_seq"], self.cfgs["grpo"], self.seed, self.threads)
            _print_before(con, before)
            return before, {m: Path(train(self.cfgs[m], console=_quiet)) for m in RUNS}
        t0, polls, before = time.perf_counter(), 0, None
        with self.pool:
            while wait(list(self.futures.values()), timeout=POLL_S)[1]:
                polls += 1
                if before is None and self.futures["before"].done():
                    before = self.futures["before"].result()
                    progress.before_done = True
                    _print_before(con, before)
                progress.before_elapsed = time.perf_counter() - t0
                progress.now = time.time()  # the clock of the metrics files' modification times
                _observe(progress, self.cfgs)
                if polls % REPORT_EVERY == 0:
                    con.print("    " + " · ".join(f"{RUNS[m]} {progress.runs[m].done}/{c.trainer.num_stages}"
                                                  for m, c in self.cfgs.items()) + f" · {clock.left()}")
            before = self.futures["before"].result()
            if not progress.before_done:
                _print_before(con, before)
            a, b = self.futures["lane_a"].result(), self.futures["lane_b"].result()
        dirs = dict(zip(LANES[0][1:], a)) | dict(zip(LANES[1], b))
        return before, {m: Path(d) for m, d in dirs.items()}


def estimate_errors(estimates: list[tuple[float, float]], total: float) -> list[dict]:
    """Each printed time left beside the time that was actually left (``total`` − when it was said)."""
    return [{"at_s": at, "said_s": said, "actual_s": round(total - at, 1),
             "error": round(said / (total - at) - 1, 3) if total - at > 0 else None} for at, said in estimates]


def _print_before(con, before: dict) -> None:
    con.print(f"chain warm start: the three agents' vote {before['vote']:.3f}, "
              f"one agent in one pass {before['one_pass']:.3f}")


def _rollout_speed(rt) -> Optional[float]:
    """The chosen rollout's measured generated tokens per second (``rollout.engine=auto``), if measured."""
    choice = getattr(rt, "rollout_choice", None)
    speeds = [v for v in (getattr(choice, "speeds", None) or {}).values() if v]
    return max(speeds) if speeds else None


def _config(output_dir: Path, method: str, stages: int | None, seed: int, overrides: list[str] = ()):
    keys = PRESET + [f"output_dir={output_dir}", f"method={method}", f"seed={seed}", f"run_name=quickstart_{method}"]
    if stages:
        keys.append(f"trainer.num_stages={stages}")
    return load_config(None, keys + list(overrides))


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed + 1000)


def _vote(pool, rt, seed: int) -> float:
    return evaluate_relay(pool, AGENTS, rt.fmt, rt.engine, rt.eval, n=EVAL_SAMPLES, sampling=rt.sampling,
                          generator=_gen(seed))["vote"]["acc"]


def _one_pass(pool, agent: str, grt, seed: int) -> float:
    """``agent`` of ``pool`` on GRPO's one-pass prompt (``grt``: a GRPO runtime of the same task)."""
    return evaluate_single(pool, agent, grt.fmt, grt.engine, grt.eval, n=EVAL_SAMPLES, sampling=grt.sampling,
                           generator=_gen(seed))["pass@1"]


def _final_certificate(run_dir: Path) -> dict:
    """The last ``certificate/*`` record of a SAT-Seq run's metrics.jsonl (the one after its last stage)."""
    rows = read_jsonl(Path(run_dir) / "metrics.jsonl", allow_partial_last_line=True)
    last = next((r for r in reversed(rows) if "certificate/vote_lower" in r), {})
    return {k.split("/", 1)[1]: v for k, v in last.items() if k.startswith("certificate/")}


def _trained(cfg, run_dir: Path, console):
    from satseq.checkpoint import load_trainer_state
    from satseq.loop import build_run

    rt = build_run(cfg, console=console).rt
    load_trainer_state(run_dir, rt.pool)
    return rt


def _in_three_seats(cfg, run_dir: Path, rt, grt, seed: int, con) -> dict:
    """A trained one-policy run (GRPO, the shared policy): its policy in all three relay seats (the
    vote, on ``rt``'s relay) and alone on the one-pass prompt (``grt``: a GRPO runtime of the task)."""
    trained = _trained(cfg, run_dir, con.print)
    policy = trained.pool.module(trained.pool.names[0])
    relay_pool = AgentPool.full(AGENTS, [policy] * len(AGENTS), trained.tokenizer)
    alone = AgentPool.full(grt.pool.names[:1], [policy], trained.tokenizer)
    return {"vote": _vote(relay_pool, rt, seed), "one_pass": _one_pass(alone, grt.pool.names[0], grt, seed)}


def run_quickstart(output_dir: Path = Path("outputs"), stages: int | None = None, seed: int = 0,
                   console=None, overrides: list[str] = ()) -> dict:
    """The steps above; ``overrides`` (``key=value``) apply to every run after the preset."""
    from rich.console import Console
    from rich.table import Table

    from satseq.loop import build_run

    con = console or Console()
    t_start = time.perf_counter()
    results: dict = {"seed": seed, "task": "chain", "eval_samples": EVAL_SAMPLES, "timings_s": {}}

    # 1. the warm starts (copied), and this machine's rollout speed (rollout.engine=auto measures it)
    cfgs = {m: _config(output_dir, m, stages, seed, overrides) for m in RUNS}
    cfg, gcfg = cfgs["sat_seq"], cfgs["grpo"]
    con.print(f"[bold][1/{len(PHASES)}][/bold] {PHASES[0][1]}")
    t1 = time.perf_counter()
    rt = build_run(cfg, console=con.print).rt
    grt = build_run(gcfg, console=con.print).rt
    results["n_problems"], results["stages"] = len(rt.eval), cfg.trainer.num_stages
    progress = Progress(lanes=[list(lane) for lane in LANES],
                        runs={m: RunTrack(m, c.trainer.num_stages) for m, c in cfgs.items()},
                        tail_left=list(TAIL), eval_scale=len(rt.eval) / REFERENCE_PROBLEMS,
                        toks=_rollout_speed(rt))
    clock = PhaseClock(con, progress, stages=cfg.trainer.num_stages, problems=len(rt.eval))
    clock.spent["warm_starts"] = time.perf_counter() - t1

    # 2. the warm start's "before" figures, then SAT-Seq (three agents), beside GRPO (one agent) and then one
    # shared policy on the relay: the same stages
    trainings = SideBySide(cfgs, seed)
    if len(trainings.lanes) == 1:
        progress.lanes = trainings.lanes
    try:
        clock.start("train")
        results["before"], run_dirs = trainings.wait(con, progress, clock)
        progress.before_done = True
    finally:
        trainings.close()  # an error or Ctrl-C above: the trainings stop too
    _observe(progress, cfgs)
    for r in progress.runs.values():
        r.done = r.stages
    clock.start("sat_seq_eval")
    trained = _trained(cfg, run_dirs["sat_seq"], con.print)
    results["sat_seq"] = {"vote": _vote(trained.pool, trained, seed), "one_pass": None}
    results["certificate"] = _final_certificate(run_dirs["sat_seq"])
    clock.start("shared_eval")
    results["shared_policy"] = _in_three_seats(cfgs["shared_policy"], run_dirs["shared_policy"], rt, grt, seed, con)
    clock.start("grpo_eval")
    results["grpo"] = _in_three_seats(gcfg, run_dirs["grpo"], rt, grt, seed, con)
    clock.stop()
    results["timings_s"].update(clock.spent)
    results["timings_s"]["total"] = time.perf_counter() - t_start
    results["timings_s"]["runs"] = {m: {"s_per_stage": r.seconds_per_stage()} for m, r in progress.runs.items()}
    results["timings_s"]["estimates"] = estimate_errors(clock.estimates, time.perf_counter() - clock.began)

    # 6. the table
    cell = lambda v: "—" if v is None else f"{v:.3f}"  # noqa: E731
    table = Table(title=f"the chain task (a+b+c): held-out accuracy, {results['n_problems']} problems never trained on, "
                        f"{EVAL_SAMPLES} sampled episodes each (T = 1), after {results['stages']} stages of each "
                        "method (SAT-Seq and the shared policy generate the same samples, GRPO a third)")
    table.add_column("")
    for _, col in COLUMNS:
        table.add_column(col, justify="right")
    for key, label in ROWS:
        table.add_row(label, *(cell(results[c][key]) for c, _ in COLUMNS))
    con.print(table)
    cert = results["certificate"]
    if cert:
        con.print(f"SAT-Seq's certificate (256 fresh held-out episodes, probability ≥ 0.95): the vote is at least "
                  f"{cert['vote_lower']:.3f} (measured {cert['vote_mean']:.3f}), "
                  f"at least {cert['vote_improvement_lower']:+.3f} above the warm start's")
    gain = results["sat_seq"]["vote"] - results["before"]["vote"]
    con.print(f"the relay's vote: {results['before']['vote']:.3f} → {results['sat_seq']['vote']:.3f} with three agents "
              f"(SAT-Seq, {gain * 100:+.1f} points), → {cell(results['shared_policy']['vote'])} with one policy "
              f"trained in all three seats (the same samples); one agent trained on one pass (GRPO): "
              f"{cell(results['grpo']['one_pass'])} alone, {cell(results['grpo']['vote'])} in the three seats · "
              f"total {results['timings_s']['total']:.0f} s")
    out = Path(output_dir) / "quickstart"
    write_json(out / "results.json", results)
    md = ["| | " + " | ".join(col for _, col in COLUMNS) + " |", "|---|" + "---|" * len(COLUMNS)]
    md += [f"| {label} | " + " | ".join(cell(results[c][key]) for c, _ in COLUMNS) + " |" for key, label in ROWS]
    write_text(out / "results.md", "\n".join(md) + "\n")
    return results
