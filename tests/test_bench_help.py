"""bench/README.md lists every bench script, and each of them answers ``--help`` (exit 0) without
loading torch: the table and the scripts stay in step, and a moved or renamed script fails here."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
ROW = re.compile(r"^\| `([^`]+)` \|")


def _listed() -> list[list[str]]:
    """The first cell of each row of bench/README.md's table: a script under bench/ and its subcommand."""
    rows = [ROW.match(line).group(1).split() for line in (BENCH / "README.md").read_text().splitlines()
            if ROW.match(line)]
    assert rows, "bench/README.md has no table of scripts"
    return rows


LISTED = _listed()


def test_every_bench_script_is_listed():
    scripts = {p.relative_to(BENCH).as_posix() for p in BENCH.rglob("*") if p.suffix in (".py", ".sh")}
    listed = {row[0] for row in LISTED}
    assert scripts - listed == set(), "bench scripts missing from bench/README.md's table"
    assert listed - scripts == set(), "bench/README.md lists scripts that do not exist"


def test_every_subcommand_is_listed():
    """A script with subcommands lists each of them (their names, read from its --help)."""
    for script in {row[0] for row in LISTED if len(row) > 1}:
        out = subprocess.run([sys.executable, str(BENCH / script), "--help"], capture_output=True, text=True,
                             cwd=ROOT, timeout=30).stdout
        subs = set(re.search(r"\{([a-z,-]+)\}", out).group(1).split(","))
        assert subs == {row[1] for row in LISTED if row[0] == script and len(row) > 1}, script


@pytest.mark.parametrize("row", LISTED, ids=[" ".join(r) for r in LISTED])
def test_help_exits_zero_fast(row):
    path = BENCH / row[0]
    launcher = ["bash"] if path.suffix == ".sh" else [sys.executable, "-X", "importtime"]
    r = subprocess.run([*launcher, str(path), *row[1:], "--help"], capture_output=True, text=True, cwd=ROOT,
                       timeout=30)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "usage" in r.stdout.lower() or len(r.stdout.strip().splitlines()) >= 2, r.stdout
    if path.suffix == ".py":  # parse the arguments first: --help imports neither torch nor transformers
        heavy = [m for m in re.findall(r"\|\s+(\S+)$", r.stderr, re.M) if m.split(".")[0] in ("torch", "transformers")]
        assert not heavy, f"{row[0]} --help imports {heavy[:3]}"
