"""Every `satseq compare` preset uses a token or sample budget (issue 38): a seconds budget makes the figures
move with the machine's speed and load (docs/results.md: PAG's 100 s bought 113-124 stages idle, 38 loaded)."""
from pathlib import Path

import pytest

from satseq.compare.spec import read_spec

PRESETS = sorted((Path(__file__).resolve().parents[1] / "recipes" / "compare").glob("*.yaml"))


def test_presets_exist():
    assert {"pag.yaml", "mlmt.yaml", "apo.yaml"} <= {p.name for p in PRESETS}


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.name)
def test_preset_budget_is_tokens_or_samples(path):
    spec, _ = read_spec(path)
    assert spec.budget.kind in ("tokens", "samples"), f"{path.name}: budget {spec.budget.describe()}"
