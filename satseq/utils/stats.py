"""The mean and its standard error over runs, seeds or problems: the ``mean ± s.e.`` every table reports.

    mean = (1/n) Σ x_i,   s.e. = s / sqrt(n),   s² = Σ (x_i − mean)² / (n − 1)   (the sample variance, ddof 1)
"""
from __future__ import annotations

import math
from typing import Sequence


def mean_se(values: Sequence[float]) -> dict:
    """``{"mean", "se"}`` with ``se = sample std (ddof 1) / sqrt(n)`` (None under 2 values; mean None if empty)."""
    v = [float(x) for x in values]
    if not v:
        return {"mean": None, "se": None}
    m = sum(v) / len(v)
    se = math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1) / len(v)) if len(v) > 1 else None
    return {"mean": m, "se": se}


def format_mean_se(values: Sequence[float], digits: int = 3, empty: str = "—") -> str:
    """``mean ± s.e.`` of :func:`mean_se` at ``digits`` decimals; the mean alone for one value, ``empty`` for none."""
    r = mean_se(values)
    if r["mean"] is None:
        return empty
    if r["se"] is None:
        return f"{r['mean']:.{digits}f}"
    return f"{r['mean']:.{digits}f} ± {r['se']:.{digits}f}"
