"""``replace_marked_block``: how a docs page carries a bench script's output (quickstart_spread.py,
stability_tables.py --write)."""
import pytest

from satseq.errors import DataError
from satseq.utils.io import replace_marked_block

B, E = "<!-- t:begin -->", "<!-- t:end -->"


def test_replaces_only_the_block_and_is_idempotent(tmp_path):
    page = tmp_path / "p.md"
    page.write_text(f"intro\n{B}\nold table\n{E}\noutro\n")
    replace_marked_block(page, B, E, "| a |\n| 1 |\n")
    want = f"intro\n{B}\n| a |\n| 1 |\n{E}\noutro\n"
    assert page.read_text() == want
    replace_marked_block(page, B, E, "| a |\n| 1 |")
    assert page.read_text() == want


@pytest.mark.parametrize("text", ["no markers\n", f"{B}\n{E}\n{B}\n{E}\n", f"{B} only\n"])
def test_a_page_without_exactly_one_block_is_named_and_left_alone(tmp_path, text):
    page = tmp_path / "p.md"
    page.write_text(text)
    with pytest.raises(DataError, match=r"p\.md: needs exactly one"):
        replace_marked_block(page, B, E, "x")
    assert page.read_text() == text
