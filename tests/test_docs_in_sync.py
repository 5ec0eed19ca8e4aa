"""The docs that are generated from code stay true; the README's commands exist."""
from pathlib import Path

from satseq.config.docs import render_markdown

ROOT = Path(__file__).resolve().parents[1]


def test_configuration_doc_matches_schema():
    assert (ROOT / "docs" / "configuration.md").read_text() == render_markdown(), \
        "regenerate with: python -m satseq.config.docs > docs/configuration.md"


def test_readme_commands_and_links_exist():
    readme = (ROOT / "README.md").read_text()
    makefile = (ROOT / "Makefile").read_text()
    for target in ("quickstart:", "test:", "test-slow:"):
        assert target in makefile
    assert "make quickstart" in readme and "make test" in readme
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    for link in ("docs/sat_seq.md", "docs/embedded_default.md", "docs/design.md", "docs/configuration.md",
                 "docs/results.md", "recipes/sat_seq/README.md"):
        assert link in readme and (ROOT / link).exists(), link
    for script in ("recipes/sat_seq/train_dapo.sh", "recipes/sat_seq/run_inference.sh"):
        assert (ROOT / script).exists()
