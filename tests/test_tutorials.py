"""Every ```bash block of docs/tutorials/*.md and of README.md runs, as a reader would paste it.

Each page runs, its blocks in order, as one ``bash -euo pipefail`` script in a sandbox laid out like
a checkout (``<tmp>/<page>/main`` beside ``<tmp>/<page>/shared``): the repository's top-level
entries are linked in, except ``satseq/``, ``data/`` and ``recipes/``, which are copied (a page may
add a method folder or write files there), and ``outputs/`` and ``models/``, which start empty.
``outputs/embedded/warm_start_seed0`` is seeded with a randomly initialised tiny model, so that
``model.path=embedded`` does not train the real warm start (minutes); what is checked is that the
commands run and write what the page says, not what they learn.

The commands are the page's, with one documented convention for size (docs/tutorials/index.md):
every training command (``satseq train``, ``satseq.cli train`` under torchrun,
``recipes/sat_seq/train_dapo.sh``, and ``python SCRIPT.py`` whose arguments are config overrides)
gets :data:`TINY` appended (later keys win, so ``trainer.num_stages=20`` becomes 1), every
evaluation (``satseq eval``) gets :data:`TINY_EVAL`, and ``make TARGET`` runs as ``make -n TARGET``
(the quickstart takes minutes and ``make test`` is this suite). Blocks marked ```shell are not run
(they need a Slurm cluster); the files they name must exist.

The pages run two at a time (the slowest first), one test per page.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = ROOT / "docs" / "tutorials"
PAGES = sorted(p for p in TUTORIALS.glob("*.md") if p.name != "index.md")
TINY = ("trainer.num_stages=1 trainer.train_batch_size=2 trainer.eval_every=0 trainer.save_every=0 "
        "sat_seq.group_size=2 grpo.group_size=2 sat_seq.certificate.prompts=8 rollout.max_new_tokens=6 "
        "data.train_size=16 data.eval_size=4 threads=1 trainer.tensorboard=false trainer.progress=false")
TINY_EVAL = "--limit 2 --max_new_tokens 8 --threads 1 --no_progress"
COPIED = ("satseq", "data", "recipes")
SKIPPED = {".git", "outputs", "models", "site", ".pytest_cache", ".hypothesis", "runs"}
# the slowest pages first (two workers), so that the run's wall-clock is about half the sum
ORDER = ("new_environment", "evaluate", "scale", "reward", "own_model", "dashboard", "new_method")

TRAIN = re.compile(r"(satseq(\.cli)? train\b|train_dapo\.sh\b|bin/python [\w./-]+\.py\b)")
EVAL = re.compile(r"satseq eval\b")
MAKE = re.compile(r"^make (\w[\w-]*)")


def bash_blocks(text: str, lang: str = "bash") -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, flags=re.S | re.M)


def _split_command(line: str) -> tuple[str, str]:
    """(the first command of a line, the rest: a comment, `;`, `&&`, `|` or a redirection), quote-aware."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c in ";|&>" or (c == "#" and (i == 0 or line[i - 1].isspace())):
            return line[:i].rstrip(), " " + line[i:]
    return line.rstrip(), ""


def rewrite(script: str) -> str:
    """The convention: tiny sizes appended to training and evaluation commands, `make -n`."""
    out, lines, heredoc = [], script.splitlines(), None
    i = 0
    while i < len(lines):
        line = lines[i]
        if heredoc is not None:  # a file's body: verbatim
            out.append(line)
            heredoc = None if line.strip() == heredoc else heredoc
            i += 1
            continue
        logical = [line]
        while logical[-1].endswith("\\") and i + 1 < len(lines):
            i += 1
            logical.append(lines[i])
        i += 1
        text = "\n".join(logical)
        m = re.search(r"<<-?\s*'?\"?(\w+)", text)
        if m:
            heredoc = m.group(1)
        cmd, rest = _split_command(text)
        if TRAIN.search(cmd):
            cmd += " " + TINY
        elif EVAL.search(cmd):
            cmd += " " + TINY_EVAL
        elif MAKE.match(cmd.strip()):
            cmd = re.sub(r"^(\s*)make ", r"\1make -n ", cmd)
        out.append(cmd + rest)
    return "\n".join(out) + "\n"


def _fake_warm_start(dest: Path) -> Path:
    from satseq.models.tiny import build_tiny_model, save_model_dir

    out = dest / "embedded" / "warm_start_seed0"
    save_model_dir(*build_tiny_model(seed=0), out)
    (out / "warm_start.json").write_text("{}")
    return dest


def _sandbox(base: Path, warm: Path) -> Path:
    main = base / "main"
    main.mkdir(parents=True)
    for entry in ROOT.iterdir():
        if entry.name in SKIPPED or entry.name.endswith(".egg-info"):
            continue
        if entry.name in COPIED:
            shutil.copytree(entry, main / entry.name, symlinks=True)
        else:
            (main / entry.name).symlink_to(entry)
    shutil.copytree(warm, main / "outputs")
    shared = ROOT.parent / "shared"
    if shared.exists():
        (base / "shared").symlink_to(shared)
    return main


def _run_page(page: Path, base: Path, warm: Path) -> dict:
    main = _sandbox(base / page.stem, warm)
    script = "set -euo pipefail\n" + "".join(rewrite(b) for b in bash_blocks(page.read_text()))
    (main.parent / "script.sh").write_text(script)
    env = dict(os.environ, PYTHONPATH=str(main), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               RAY_USAGE_STATS_ENABLED="0")
    env.pop("SATSEQ_DATA_DIR", None)
    t0 = time.monotonic()
    r = subprocess.run(["bash", str(main.parent / "script.sh")], cwd=main, env=env, capture_output=True,
                       text=True, timeout=600)
    return {"rc": r.returncode, "out": r.stdout[-4000:] + r.stderr[-6000:], "script": script, "main": main,
            "seconds": time.monotonic() - t0}


def _priority(page: Path) -> int:
    return next((i for i, key in enumerate(ORDER) if key in page.stem), len(ORDER))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every page run, two at a time; {page name: result}."""
    base = tmp_path_factory.mktemp("tutorials")
    warm = _fake_warm_start(base / "warm")
    pages = sorted([*PAGES, ROOT / "README.md"], key=_priority)
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {p.name: pool.submit(_run_page, p, base, warm) for p in pages}
        return {name: f.result() for name, f in futures.items()}


def test_every_tutorial_is_in_the_index_and_has_commands():
    index = (TUTORIALS / "index.md").read_text()
    assert len(PAGES) == 7
    for page in PAGES:
        assert f"({page.name})" in index, page.name
        assert bash_blocks(page.read_text()), page.name


def test_rewrite_convention():
    s = rewrite(".venv/bin/satseq train method=grpo trainer.num_stages=20   # -> outputs/grpo\n"
                "cat > f.py <<'EOF'\nsatseq train x\nEOF\n"
                ".venv/bin/satseq eval --dataset gsm8k --limit 50 | tail -3\nmake test\n")
    assert f"trainer.num_stages=20 {TINY} # -> outputs/grpo" in s
    assert "\nsatseq train x\n" in s and f"--limit 50 {TINY_EVAL} | tail -3" in s and "make -n test" in s


def test_shell_blocks_name_files_that_exist():
    for page in PAGES:
        for block in bash_blocks(page.read_text(), "shell"):
            for path in re.findall(r"(recipes/[\w./-]+)", block):
                assert (ROOT / path).exists(), f"{page.name}: {path}"


@pytest.mark.parametrize("page", [p.name for p in PAGES] + ["README.md"])
def test_page_commands_run(runs, page):
    r = runs[page]
    assert r["rc"] == 0, f"{page} failed ({r['seconds']:.0f} s)\n--- script\n{r['script']}\n--- output\n{r['out']}"
    main = r["main"]
    expected = {  # what each page says its commands write
        "own_model.md": ["models/my-model/config.json", "outputs/my_sat_seq/metrics.jsonl",
                         "outputs/my_sat_seq/agent_3_stage_1/adapter_model.safetensors",
                         "outputs/my_eval/metrics.json"],
        "reward.md": ["outputs/grpo_brief/metrics.jsonl", "outputs/grpo_brief_api/metrics.jsonl",
                      "outputs/sat_seq_brief/metrics.jsonl"],
        "new_method.md": ["outputs/reinforce/metrics.jsonl", "outputs/reinforce_eval/metrics.json"],
        "scale.md": ["outputs/sat_seq_ray/metrics.jsonl", "outputs/sat_seq_ddp/metrics.jsonl"],
        "evaluate.md": ["models/smollm2-135m/config.json", "outputs/eval_aime24/metrics.json",
                        "outputs/eval_math500/metrics.json", "outputs/eval_gsm8k/metrics.json"],
        "dashboard.md": ["outputs/sat_seq_cert/dashboard.png", "outputs/sat_seq_cert/metrics.jsonl"],
    }.get(page, [])
    for rel in expected:
        assert (main / rel).exists(), f"{page}: {rel} missing\n{r['out']}"
