"""``satseq compare``: methods × seeds at one budget, evaluated on one held-out set, beside their
trivial baselines (docs/compare.md). ``spec`` (the YAML), ``runner`` (train to the budget, resumably,
and evaluate), ``baselines`` (warm start, best-of-k, constant verifiers, the coach), ``report`` and
``plot`` (comparison.md / .json / .png), ``cli`` (the command)."""
from __future__ import annotations

__all__ = ["run_comparison"]


def run_comparison(*args, **kwargs):
    """See :func:`satseq.compare.cli.run_comparison`."""
    from satseq.compare.cli import run_comparison as run

    return run(*args, **kwargs)
