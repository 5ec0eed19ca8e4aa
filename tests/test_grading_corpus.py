"""The answer-equivalence corpus (tests/data/grading_corpus.jsonl): every human verdict holds.

Golds are real benchmark answers (``source`` names the shared-data row), preds are written the way
small models write answers; see tests/data/make_grading_corpus.py and docs/grading.md.
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from satseq.rewards.grade import correctness_reward, is_equivalent

CORPUS = [json.loads(line) for line in (Path(__file__).parent / "data" / "grading_corpus.jsonl").read_text().splitlines()]


def test_corpus_shape():
    assert len(CORPUS) >= 150
    for row in CORPUS:
        assert set(row) == {"pred", "gold", "verdict", "category", "kind", "source"}
        assert isinstance(row["verdict"], bool) and row["kind"] in ("answer", "response")
        assert row["source"].split(":")[0] in ("math500", "math_train", "gsm8k", "aime24")
    verdicts = Counter(row["verdict"] for row in CORPUS)
    assert verdicts[True] >= 50 and verdicts[False] >= 50  # both kinds of error are measured
    cats = {row["category"] for row in CORPUS}
    assert {"percent", "rounded-reference", "exact-reference", "nested-box", "truncated-box", "units"} <= cats


@pytest.mark.parametrize("row", CORPUS, ids=[f"{i}-{r['category']}" for i, r in enumerate(CORPUS)])
def test_corpus_verdict(row):
    if row["kind"] == "response":
        got = correctness_reward(row["pred"], row["gold"]) == 1.0
    else:
        got = is_equivalent(row["pred"], row["gold"], timeout=30)
    assert got is row["verdict"], (row["pred"], row["gold"])
