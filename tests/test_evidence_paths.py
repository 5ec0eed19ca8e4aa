"""Every figure a reader is pointed to can be re-read (issue 65): the kept evidence the docs name exists,
each headline of the results index names its kept evidence, and bench/studies/ stays within its size budget.

- every ``bench/studies/...`` path named in README.md and docs/*.md (the changelog aside: the record of
  what was removed) exists in the repository;
- every row of docs/results.md's index names, in its "kept evidence" column, at least one
  ``bench/studies/...`` path, unless the row is one of :data:`NOT_KEPT` (each with the reason and the
  commit it was measured at, which the cell must state): those are the open debts, listed here so that
  one more cannot slip in unnoticed and a paid one must be struck off;
- the files under bench/studies/ add up to no more than the budget bench/studies/README.md states.
"""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
STUDIES = ROOT / "bench" / "studies"
PATH = re.compile(r"bench/studies/[A-Za-z0-9_./@=+-]*[A-Za-z0-9_/]")
BUDGET = re.compile(r"size budget: (\d+) MB", re.IGNORECASE)

#: index rows (by the start of their claim) whose figures are not kept yet: why, and the commit to state
NOT_KEPT = {
    "the base warm start does not depend": ("the six builds' table, at cb740b4's warm-start code", "cb740b4"),
    "asynchronous rollouts (`trainer.max_staleness`), 2 cores": ("a timing, not kept", "37db168"),
    "SmolLM2-135M-Instruct on GSM8K": ("the base model's greedy evaluation, 0/50", "9b6a65b"),
}


def named_paths(text: str) -> list[str]:
    """The ``bench/studies/...`` paths a page names (trailing punctuation and a trailing slash dropped)."""
    return sorted({m.rstrip("/.") for m in PATH.findall(text)})


def missing_paths(pages: dict[str, str], root: Path = ROOT) -> list[str]:
    return [f"{name}: {p}" for name, text in pages.items() for p in named_paths(text) if not (root / p).exists()]


def _pages() -> dict[str, str]:
    pages = {"README.md": (ROOT / "README.md").read_text()}
    pages.update({f"docs/{p.name}": p.read_text() for p in sorted(DOCS.glob("*.md")) if p.name != "changelog.md"})
    return pages


def index_rows() -> list[list[str]]:
    body = (DOCS / "results.md").read_text().split("## Index", 1)[1].split("\n## ", 1)[0]
    lines = [l for l in body.splitlines() if l.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert "kept evidence" in header, "docs/results.md's index has no 'kept evidence' column"
    j = header.index("kept evidence")
    cells = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines[2:]]
    return [[row[0], row[j]] for row in cells]


def test_every_named_study_path_exists():
    assert not missing_paths(_pages()), missing_paths(_pages())


def test_a_planted_missing_path_is_caught(tmp_path):
    (tmp_path / "bench" / "studies" / "kept_study").mkdir(parents=True)
    pages = {"a.md": "runs kept in `bench/studies/kept_study/`.", "b.md": "see bench/studies/never_kept."}
    assert missing_paths(pages, tmp_path) == ["b.md: bench/studies/never_kept"]


def test_each_index_headline_names_its_kept_evidence():
    rows = index_rows()
    assert len(rows) >= 10
    used = set()
    for claim, evidence in rows:
        if "results_speed.md#index" in evidence:  # the pointer to the speed page's own index
            continue
        debt = [k for k in NOT_KEPT if claim.startswith(k)]
        if named_paths(evidence):
            assert not debt, f"index row {claim!r} names its evidence now: strike it off NOT_KEPT"
            continue
        assert debt, f"index row {claim!r} names no kept evidence under bench/studies/"
        used.add(debt[0])
        reason, commit = NOT_KEPT[debt[0]]
        assert commit in evidence and "not kept" in evidence, \
            f"index row {claim!r}: its evidence cell must say 'not kept' and name {commit} ({reason})"
    assert used == set(NOT_KEPT), f"NOT_KEPT names rows the index no longer has: {set(NOT_KEPT) - used}"


def test_bench_studies_stay_within_their_size_budget():
    budget = BUDGET.search((STUDIES / "README.md").read_text())
    assert budget, "bench/studies/README.md states no 'size budget: N MB'"
    size = sum(p.stat().st_size for p in STUDIES.rglob("*") if p.is_file())
    assert size <= int(budget.group(1)) * 2 ** 20, f"bench/studies/ holds {size / 2 ** 20:.1f} MB"
