"""No page states a headline figure that docs/results.md (or docs/results_speed.md) does not.

docs/results.md holds one current figure per claim about what the methods achieve, docs/results_speed.md one
per claim about speed and memory; "results.md" below means the two. These tests fail when a figure is edited on one page
and not on the other:

- docs/headlines.json (what bench/figures/reproduce.py checks) against results.md's "Reproducing the headlines"
  table, and each headline against the section of results.md that measures it (for the quickstart, the
  documented mean ± s.e. and seed range against its per-seed table);
- every figure in the README's method table against one section of results.md that holds all of them;
- every figure in results.md's index against the section the index row links to;
- figures on the other pages in paragraphs about the quickstart, TRL, the rollout engine against
  `generate`, the `satseq compare` presets or asynchronous rollouts, against the corresponding sections
  of results.md;
- each quantity of docs/quantities.json (one stated on more than one page) against its one current figure,
  wherever any page states it: the same quantity given two values on two pages fails, and a planted
  disagreement is caught.

A "figure" is a measured number as the docs write them: ``0.827 ± 0.017``, a ratio ``1.78×`` or
``1.56–1.59×``, or a number with three decimals such as ``0.955`` (two-decimal numbers are mostly
settings: lr, δ, quantiles).
"""
import json
import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RESULT_PAGES = ("results.md", "results_speed.md")  # the methods' evidence; speed and memory
PAGE_TEXT = {name: (DOCS / name).read_text() for name in RESULT_PAGES}
RESULTS = "\n".join(PAGE_TEXT.values())

FIGURE = re.compile(
    r"\d+\.\d+ ± \d+\.\d+"                       # mean ± s.e.
    r"|(?<![\w.])\d+(?:\.\d+)?(?:–\d+(?:\.\d+)?)?×"  # a ratio or a range of ratios
    r"|(?<![\w.])\d\.\d{3}(?![\d])"               # a three-decimal figure
)


def _slug(heading: str) -> str:
    """Python-Markdown's toc slugify (what mkdocs uses for anchors)."""
    text = unicodedata.normalize("NFKD", heading).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _sections(md: str) -> dict[str, tuple[str, str]]:
    """slug -> (heading, body) for every '## ' section."""
    out, heading, body = {}, None, []
    for line in md.splitlines():
        if line.startswith("## "):
            if heading is not None:
                out[_slug(heading)] = (heading, "\n".join(body))
            heading, body = line[3:].strip(), []
        elif heading is not None:
            body.append(line)
    if heading is not None:
        out[_slug(heading)] = (heading, "\n".join(body))
    return out


SECTIONS_OF = {name: _sections(text) for name, text in PAGE_TEXT.items()}
SECTIONS = {slug: sec for page in SECTIONS_OF.values() for slug, sec in page.items() if slug != "index"}


def _section(prefix: str) -> str:
    found = [body for heading, body in SECTIONS.values() if heading.startswith(prefix)]
    assert len(found) == 1, f"docs/results.md: no single section whose heading starts with {prefix!r}"
    return found[0]


def _norm(s: str) -> str:
    """One spelling for the ± / dash variants the pages and headlines.json use."""
    return s.replace("+-", "±").replace("–", "-").replace("**", "").strip()


def _present(figure: str, text: str) -> bool:
    """figure occurs in text as a whole figure (0.82 does not match inside 0.827, 1.5× not in 11.5×)."""
    return re.search(r"(?<![\w.])" + re.escape(figure) + r"(?![\d])", text.replace("**", "")) is not None


def _table_rows(body: str, first_header_cell: str) -> list[list[str]]:
    """Rows of the first table in body whose header row starts with first_header_cell."""
    lines = body.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("| " + first_header_cell):
            rows = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                rows.append([c.strip() for c in row.strip().strip("|").split("|")])
            return rows
    raise AssertionError(f"no table starting with {first_header_cell!r}")


HEADLINES = {k: v for k, v in json.loads((DOCS / "headlines.json").read_text()).items() if not k.startswith("_")}
# which section of results.md measures each bench/figures/reproduce.py case
CASE_SECTION = {"quickstart": "Quickstart", "pag": "Comparison at one budget"}


def test_reproduce_table_is_headlines_json():
    rows = _table_rows(_section("Reproducing the headlines"), "case")
    table = {(r[0], r[1]): r for r in rows}
    expected = {(case, fig["name"]): fig for case, v in HEADLINES.items() for fig in v["figures"]}
    assert set(table) == set(expected), "results.md's reproduce table and docs/headlines.json list different figures"
    for key, fig in expected.items():
        row = table[key]
        assert _norm(row[2]) == _norm(fig["documented"]), (key, row[2], fig["documented"])
        lo, hi = (float(x) for x in row[3].split("–"))
        assert (lo, hi) == (fig["lo"], fig["hi"]), (key, row[3], fig["lo"], fig["hi"])


def test_each_headline_is_in_the_section_that_measures_it():
    assert set(HEADLINES) <= set(CASE_SECTION)
    for case, v in HEADLINES.items():
        body = _section(CASE_SECTION[case])
        for fig in v["figures"]:
            doc = _norm(fig["documented"])
            head = re.match(r"(\d\.\d+(?: ± \d\.\d+)?)", doc).group(1)
            assert _present(head, body), f"{case} {fig['name']}: {head} not in results.md's {CASE_SECTION[case]!r}"
            for a, b in re.findall(r"(\d\.\d+)-(\d\.\d+)", doc):  # its spread: seeds / re-runs / builds
                assert f"{a}–{b}" in RESULTS or (_present(a, body) and _present(b, body)), \
                    f"{case} {fig['name']}: spread {a}–{b} not in results.md"


def test_quickstart_headlines_are_the_seed_table():
    """The quickstart's section holds bench/methods/quickstart_spread.py's table (one row per seed, then the
    mean ± s.e.); headlines.json documents each figure as that mean ± s.e. with the seeds' min-max."""
    body = _section("Quickstart")
    rows = _table_rows(body, "seed")
    header = [c.strip() for c in next(l for l in body.splitlines() if l.startswith("| seed")).strip("|").split("|")]
    seeds = [r for r in rows if r[0].isdigit()]
    mean_row = next(r for r in rows if r[0].startswith("mean"))
    assert len(seeds) >= 3, "the quickstart's spread needs at least 3 seeds (a mean ± s.e. over seeds)"
    figs = {f["name"]: _norm(f["documented"]) for f in HEADLINES["quickstart"]["figures"]}
    for name, col in (("vote before", "three agents: warm start"), ("vote SAT-Seq", "after SAT-Seq"),
                      ("vote shared policy", "one shared policy in the three seats (same samples)"),
                      ("one pass before", "one agent, one pass: warm start"), ("one pass GRPO", "after GRPO"),
                      ("vote GRPO", "GRPO's policy in all three seats")):
        j = header.index(col)
        values = [float(r[j]) for r in seeds]
        m = sum(values) / len(values)
        se = (sum((v - m) ** 2 for v in values) / (len(values) - 1) / len(values)) ** 0.5
        # the table's cells are rounded to 3 decimals, its mean ± s.e. computed from the unrounded values
        doc_m, doc_se = (float(x) for x in _norm(mean_row[j]).split(" ± "))
        assert abs(doc_m - m) <= 0.0015 and abs(doc_se - se) <= 0.0015, (col, mean_row[j], m, se)
        assert figs[name].startswith(f"{_norm(mean_row[j])} (seeds {min(values):.3f}-{max(values):.3f})"), (name, figs[name])


def _readme_method_rows() -> list[tuple[str, list[str]]]:
    readme = (ROOT / "README.md").read_text()
    body = readme.split("## Methods", 1)[1].split("\n## ", 1)[0]
    rows = _table_rows(body, "method")
    return [(r[0], FIGURE.findall(r[2])) for r in rows]


def test_readme_method_figures_are_in_results():
    rows = _readme_method_rows()
    assert sum(bool(figs) for _, figs in rows) >= 6, "the README's method table lost its figures?"
    for method, figs in rows:
        if not figs:
            continue
        homes = [h for h, body in SECTIONS.values() if all(_present(f, body) for f in figs)]
        assert homes, f"README, {method}: no section of docs/results.md holds all of {figs}"


@pytest.mark.parametrize("page", RESULT_PAGES)
def test_results_index_figures_are_in_their_sections(page):
    """Each index row links to a section of its page (``#anchor``) or of the other (``other.md#anchor``),
    which holds every figure of the row; a row that points at the other page as a whole holds none."""
    rows = _table_rows(PAGE_TEXT[page].split("## Index", 1)[1], "claim")
    assert len(rows) >= 10
    for claim, figure, link, *_evidence in rows:  # results.md's index also names each row's kept evidence
        found = re.search(r"\((?:([\w.]+\.md))?#([^)]+)\)", link)
        if found is None:
            other = re.search(r"\(([\w.]+\.md)\)", link).group(1)
            assert other in RESULT_PAGES and not FIGURE.findall(figure), (page, claim)
            continue
        sections = SECTIONS_OF[found.group(1) or page]
        anchor = found.group(2)
        assert anchor in sections, f"{page}: index row {claim!r} links to #{anchor}, which is no section"
        body = sections[anchor][1]
        for f in FIGURE.findall(figure):
            assert _present(f, body), f"{page}: index row {claim!r}: {f} is not in section {sections[anchor][0]!r}"


# paragraphs on other pages about these topics may only state figures the topic's sections hold
TOPICS = {
    "quickstart": (r"make quickstart|satseq quickstart|the quickstart (?:prints|table|shows)", ("Quickstart",)),
    "TRL": (r"\bTRL\b", ("GRPO step vs TRL",)),
    "rollout engine": (r"`generate`|\bgenerate\b|roofline", ("Rollout: SmolLM2-135M against", "bf16 autocast update")),
    "comparison": (r"compare/(?:embedded|pag|mlmt)\.yaml|60,000 (?:generated )?tokens|results\.md#comparison-at-one",
                   ("Comparison at one budget",)),
    "asynchronous rollouts": (r"max_staleness|[Aa]synchronous rollouts", ("Asynchronous rollouts",)),
}
# results.md itself, and the changelog: the record of superseded figures
OWN_PAGES = {"results.md", "results_speed.md", "changelog.md"}


def _paragraphs(text: str):
    """Prose paragraphs, and each table row on its own (a table mixes topics row by row)."""
    cur = []
    for line in text.splitlines() + [""]:
        if line.startswith("|") or not line.strip():
            if cur:
                yield " ".join(cur)
                cur = []
            if line.startswith("|"):
                yield line
        else:
            cur.append(line)


def _topic_violations(pages: list[tuple[str, str]]) -> list[str]:
    """pages: (name, markdown) pairs."""
    bad = []
    for name, text in pages:
        for para in _paragraphs(text):
            topics = [t for t, (pat, _) in TOPICS.items() if re.search(pat, para)]
            if not topics:
                continue
            allowed = "\n".join(_section(p) for t in topics for p in TOPICS[t][1])
            for f in FIGURE.findall(para):
                if not _present(f, allowed):
                    bad.append(f"{name}: {f} ({', '.join(topics)}) is not in docs/results.md's section")
    return bad


def _other_pages() -> list[tuple[str, str]]:
    pages = [ROOT / "README.md"] + sorted(p for p in DOCS.rglob("*.md") if p.name not in OWN_PAGES)
    return [(str(p.relative_to(ROOT)), p.read_text()) for p in pages]


def test_topic_figures_on_other_pages_agree_with_results():
    bad = _topic_violations(_other_pages())
    assert not bad, "\n".join(bad)


def test_topic_check_can_fail():
    """A page restating the TRL speed-up or the quickstart's vote with another value is caught."""
    trl = re.search(r"\*\*(\d+\.\d+×)\*\*", _section("GRPO step vs TRL")).group(1)
    vote = next(f["documented"].split()[0] for f in HEADLINES["quickstart"]["figures"] if f["name"] == "vote SAT-Seq")
    page = "A GRPO step is {} faster than TRL's.\n\nAfter `make quickstart` the vote is {}.\n"
    wrong, right = page.format("9.87×", "0.123"), page.format(trl, vote)
    assert len(_topic_violations([("probe.md", wrong)])) == 2
    assert not _topic_violations([("probe.md", right)])
    stale = "With `trainer.max_staleness` = 1 a stage takes {} the synchronous loop's time.\n"
    assert _topic_violations([("probe.md", stale.format("9.87×"))])


# ------------------------------------------------------------------ one quantity, one figure, on every page
# docs/quantities.json names quantities that more than one page states (issue 65, item 6: the kind of
# disagreement the checks above miss, because neither figure is a headline or in a topic's paragraph).
# Each has its current ``value``, the ``canonical`` page that measures it, its kept ``evidence`` (or the
# commit it was stated at), and where pages state it: ``phrases`` (regular expressions searched in every
# paragraph of every page; ``{FIG}`` marks the stated figure) and ``cells`` (a table cell: the page, text
# the table's header line contains, the row's first cell, the column's header). Every statement found must give
# ``value`` (or its mean alone, when the page drops the s.e.); each quantity must be stated on its
# canonical page. The changelog, the record of superseded figures, is not read.
QUANTITIES = json.loads((DOCS / "quantities.json").read_text())["quantities"]
FIG_VALUE = r"(\d+\.\d+(?: ?(?:±|\+-) ?\d+\.\d+)?)"


def _pages(root: Path) -> dict[str, str]:
    pages = [root / "README.md"] + sorted(p for p in (root / "docs").rglob("*.md") if p.name not in {"changelog.md"})
    return {str(p.relative_to(root)): p.read_text() for p in pages}


def _same(stated: str, value: str) -> bool:
    stated, value = _norm(stated), _norm(value)
    return stated == value or stated == value.split(" ± ")[0]


def _cell(text: str, table: str, row: str, column: str) -> str | None:
    """The cell in the row whose first cell is ``row``, under the header cell ``column``, of the first table
    whose header line contains ``table`` and holds such a row."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|") and table in line and i + 1 < len(lines) and lines[i + 1].startswith("|-"):
            header = _cells(line)
            if column not in header:
                continue
            for r in lines[i + 2:]:
                if not r.startswith("|"):
                    break
                cells = _cells(r)
                if cells[0] == row:
                    return cells[header.index(column)]
    return None


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def statements(q: dict, pages: dict[str, str]) -> list[tuple[str, str, str]]:
    """(page, where, stated figure) for every place a page states quantity ``q``."""
    out = []
    for phrase in q.get("phrases", []):
        pattern = re.compile(phrase.replace("{FIG}", FIG_VALUE))
        for name, text in pages.items():
            for para in _paragraphs(text):
                for m in pattern.finditer(re.sub(r"\s+", " ", para.replace("**", ""))):
                    out.append((name, f"phrase {phrase!r}", m.group(1)))
    for c in q.get("cells", []):
        text = pages.get(c["page"])
        cell = _cell(text, c["table"], c["row"], c["column"]) if text is not None else None
        if cell is None:
            out.append((c["page"], f"cell {c['row']!r} / {c['column']!r}", "(no such cell)"))
            continue
        found = re.search(r"(?<![\w.])" + FIG_VALUE, cell.replace("**", ""))
        out.append((c["page"], f"cell {c['row']!r} / {c['column']!r}", found.group(1) if found else "(no figure)"))
    return out


def quantity_disagreements(quantities: list[dict], pages: dict[str, str]) -> list[str]:
    bad = []
    for q in quantities:
        found = statements(q, pages)
        if not any(page == q["canonical"] for page, _, _ in found):
            bad.append(f"{q['name']}: not stated on its canonical page {q['canonical']}")
        for page, where, stated in found:
            if not _same(stated, q["value"]):
                bad.append(f"{q['name']}: {page} ({where}) states {stated}, the current figure is {q['value']} "
                           f"({q['canonical']}; {q['evidence']})")
    return bad


def test_each_quantity_has_one_figure_on_every_page():
    assert len(QUANTITIES) >= 10
    for q in QUANTITIES:
        assert {"name", "value", "canonical", "evidence"} <= set(q) and (q.get("phrases") or q.get("cells")), q
        assert (ROOT / q["canonical"]).is_file(), q["canonical"]
        kept = re.findall(r"bench/studies/[\w./@=-]+", q["evidence"])
        assert all((ROOT / p.rstrip(".")).exists() for p in kept), (q["name"], kept)  # kept evidence named exists
    bad = quantity_disagreements(QUANTITIES, _pages(ROOT))
    assert not bad, "\n".join(bad)


def test_quantity_check_catches_a_planted_disagreement(tmp_path):
    """A copy of the pages where one quantity's figure is changed on one page: the check names that page."""
    import shutil

    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    shutil.copytree(DOCS, tmp_path / "docs", ignore=shutil.ignore_patterns("img", "*.png"))
    assert not quantity_disagreements(QUANTITIES, _pages(tmp_path))
    planted = 0
    for q in QUANTITIES:  # every quantity stated on a second page: change it there
        others = [(page, where, stated) for page, where, stated in statements(q, _pages(tmp_path))
                  if page != q["canonical"]]
        if not others:
            continue
        page, where, stated = others[0]
        path = tmp_path / page
        text = path.read_text()
        wrong = "0.123" if not stated.startswith("0.123") else "0.456"
        mean = _norm(stated).split(" ± ")[0]
        i = text.find(mean)
        while i >= 0:  # change the first occurrence that the check then reads differently
            path.write_text(text[:i] + wrong + text[i + len(mean):])
            bad = [b for b in quantity_disagreements([q], _pages(tmp_path)) if f"{page} (" in b and wrong in b]
            if bad:
                break
            i = text.find(mean, i + 1)
        assert bad, f"{q['name']}: planting {wrong} for {stated} on {page} was not caught"
        path.write_text(text)
        planted += 1
    assert planted >= 5  # the check reads statements on pages other than the canonical one
    # and a quantity with no statement on its canonical page is itself reported
    ghost = {"name": "ghost", "value": "0.5", "canonical": "docs/results.md", "evidence": "-",
             "phrases": [r"no page says this {FIG}"]}
    assert quantity_disagreements([ghost], _pages(tmp_path)) == ["ghost: not stated on its canonical page docs/results.md"]
