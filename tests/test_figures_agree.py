"""No page states a headline figure that docs/results.md does not.

docs/results.md holds one current figure per claim. These tests fail when a figure is edited on one page
and not on the other:

- docs/headlines.json (what bench/figures/reproduce.py checks) against results.md's "Reproducing the headlines"
  table, and each headline against the section of results.md that measures it (for the quickstart, the
  documented mean ± s.e. and seed range against its per-seed table);
- every figure in the README's method table against one section of results.md that holds all of them;
- every figure in results.md's index against the section the index row links to;
- figures on the other pages in paragraphs about the quickstart, TRL, the rollout engine against
  `generate`, the `satseq compare` presets or asynchronous rollouts, against the corresponding sections
  of results.md.

A "figure" is a measured number as the docs write them: ``0.827 ± 0.017``, a ratio ``1.78×`` or
``1.56–1.59×``, or a number with three decimals such as ``0.955`` (two-decimal numbers are mostly
settings: lr, δ, quantiles).
"""
import json
import re
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RESULTS = (DOCS / "results.md").read_text()

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


SECTIONS = _sections(RESULTS)


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
CASE_SECTION = {"quickstart": "Quickstart", "chain": "SAT-Seq vs the simultaneous update vs GRPO",
                "pag": "Comparison at one budget", "mlmt": "Comparison at one budget"}


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
    assert len(seeds) >= 3, "the quickstart's spread needs 3 seeds"
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


def test_results_index_figures_are_in_their_sections():
    rows = _table_rows(RESULTS.split("## Index", 1)[1], "claim")
    assert len(rows) >= 15
    for claim, figure, link in rows:
        anchor = re.search(r"\(#([^)]+)\)", link).group(1)
        assert anchor in SECTIONS, f"index row {claim!r} links to #{anchor}, which is no section"
        body = SECTIONS[anchor][1]
        for f in FIGURE.findall(figure):
            assert _present(f, body), f"index row {claim!r}: {f} is not in section {SECTIONS[anchor][0]!r}"


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
OWN_PAGES = {"results.md", "changelog.md"}


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
