"""``satseq.utils.stats``: the mean and its standard error against numpy's (sample std, ddof 1)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from satseq.utils.stats import format_mean_se, mean_se


@pytest.mark.parametrize("values", [[0.2, 0.5, 0.9], [1, 1, 0, 0, 1], [3.0, -1.5]])
def test_mean_se_is_the_sample_std_over_sqrt_n(values):
    arr = np.asarray(values, dtype=np.float64)
    r = mean_se(values)
    assert r["mean"] == pytest.approx(arr.mean(), rel=1e-12)
    assert r["se"] == pytest.approx(arr.std(ddof=1) / math.sqrt(len(arr)), rel=1e-12)


def test_one_value_has_no_se_and_none_has_no_mean():
    assert mean_se([0.4]) == {"mean": 0.4, "se": None}
    assert mean_se([]) == {"mean": None, "se": None}
    assert format_mean_se([0.4]) == "0.400" and format_mean_se([]) == "—"
    assert format_mean_se([0.2, 0.4], digits=2) == "0.30 ± 0.10"
