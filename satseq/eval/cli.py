"""``satseq eval``: the command-line face of :func:`satseq.eval.runner.run_evaluation`.

    satseq eval --dataset aime24                                   # the embedded warm start
    satseq eval --dataset gsm8k --data_dir data --checkpoint_dir smollm2 --limit 50
    satseq eval --dataset math500 --checkpoint_dir outputs/sat_seq_dapo --n 8 --k 1 --k 8
    satseq eval --dataset embedded --checkpoint_dir outputs/sat_seq_dapo --stage 20
    satseq eval --dataset embedded --checkpoint_dir outputs/sat_seq_dapo --seat_agents agent_2,agent_1,agent_3

Registered in :mod:`satseq.cli` as ``app.command("eval")(eval_command)``, which turns a
:class:`~satseq.errors.SatseqError` into one ``error:`` line and exit status 2.
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from satseq.errors import ConfigError


def _parse_ks(values: Optional[List[str]]) -> Optional[list[int]]:
    """``--k 1 --k 8`` or ``--k 1,8``."""
    if not values:
        return None
    out = []
    for v in values:
        for part in str(v).split(","):
            part = part.strip()
            if not part:
                continue
            try:
                out.append(int(part))
            except ValueError:
                raise ConfigError(f"--k expects integers (e.g. --k 1 --k 8 or --k 1,8), got {part!r}") from None
    return out or None


def eval_command(
    dataset: str = typer.Option(..., "--dataset",
                                help="aime24 | math500 | math | gsm8k | embedded (the sum of three for MLMT runs and "
                                     "--workflow coach) | a .jsonl/.json/.parquet path | a hub id"),
    checkpoint_dir: str = typer.Option(
        "embedded", "--checkpoint_dir",
        help="a SAT-Seq run dir (relay over its agents), an HF model dir, a hub id, 'smollm2', or 'embedded'"),
    output_dir: Optional[Path] = typer.Option(None, "--output_dir", help="default: outputs/<dataset>_inference"),
    n: int = typer.Option(1, "--n", help="samples per problem"),
    k: Optional[List[str]] = typer.Option(None, "--k", help="pass@k / avg@k / maj@k to report (repeat, or 1,8); default 1 and n"),
    temperature: Optional[float] = typer.Option(None, "--temperature", help="default: 0 (greedy) for n=1, else 0.6"),
    top_p: Optional[float] = typer.Option(None, "--top_p", help="default: 0.95 when sampling, else 1"),
    max_new_tokens: Optional[int] = typer.Option(
        None, "--max_new_tokens", help="default: a run's rollout.max_new_tokens; for a model alone 512 (chat) or the embedded default"),
    limit: Optional[int] = typer.Option(None, "--limit", help="evaluate the first N problems"),
    data_dir: Optional[str] = typer.Option(None, "--data_dir", help="local copies of named datasets (<dir>/<name>/test.jsonl); default $SATSEQ_DATA_DIR or ./data"),
    batch_size: int = typer.Option(32, "--batch_size", help="sequences per generation batch"),
    threads: int = typer.Option(0, "--threads", help="torch CPU threads (0 = all cores)"),
    stage: Optional[int] = typer.Option(None, "--stage", help="run dir: evaluate this stage (default: the latest with every agent)"),
    seed: int = typer.Option(0, "--seed", help="sampling seed"),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda[:i]"),
    progress: bool = typer.Option(True, "--progress/--no_progress", help="progress bar (only on a terminal)"),
    engine: str = typer.Option("hf", "--engine", help="hf: satseq's decode loop; vllm: vLLM (make setup-vllm on CPU, "
                               "pip install 'satseq[vllm]' on GPU)"),
    workflow: Optional[str] = typer.Option(
        None, "--workflow", help="coach: MLMT's solve -> feedback -> refine; self_verify: PAG's solve -> verify -> "
        "revise (Acc@t1, Acc@final, verifier accuracy). For a single model; MLMT / PAG run dirs use theirs"),
    seat_agents: Optional[str] = typer.Option(
        None, "--seat_agents", help="run dir: its agents in seat order, comma-separated (agent_2,agent_1: each plays "
        "the other's seat; the adapter-swap test of whether they specialised)"),
):
    """Evaluate a model or a SAT-Seq run dir: pass@k, avg@k, maj@k (+ vote and per-agent accuracy); resumable."""
    from satseq.eval.runner import run_evaluation

    run_evaluation(dataset, checkpoint_dir, output_dir, n=n, ks=_parse_ks(k), temperature=temperature, top_p=top_p,
                   max_new_tokens=max_new_tokens, limit=limit, data_dir=data_dir, batch_size=batch_size,
                   threads=threads, stage=stage, seed=seed, device=device, show_progress=progress,
                   console=typer.echo, workflow=workflow, engine=engine,
                   seat_agents=seat_agents.split(",") if seat_agents is not None else None)


if __name__ == "__main__":  # python -m satseq.eval.cli ... (the main entry point is `satseq eval`)
    typer.run(eval_command)
