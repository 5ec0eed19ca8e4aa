"""Tolerances for comparing two floating-point computations of the same quantity.

Two computations that differ only in the order they sum in (AVX-512 against AVX2 kernels, MKL against
oneDNN, a sharded against a plain reduction, vLLM's fused kernels against transformers' eager forward)
agree to rounding, and how far rounding goes depends on the CPU: a bare ``1e-6`` tuned on one machine
failed on another (FSDP2 on one Gloo rank: 2.6e-6 on an AMD EPYC's AVX-512 path, 3.9e-6 on its AVX2
path). So every equality test in the suite derives its tolerance from what it compares:

* **values** computed in ``dtype`` from the same inputs: :func:`fp_tol`, ``ulps · eps(dtype) · scale``
  with ``scale`` the magnitude of the values (max |x|, at least 1: a value near 0 is the sum of terms of
  the order of the scale, and its rounding error is too);
* **weights after optimizer steps**: :func:`update_tol`, a fraction of how far the update moved them.
  AdamW divides by √v, so a rounding-level difference in a near-zero gradient component becomes a
  difference of up to lr in that weight whatever its magnitude: the tolerance is relative to the step,
  not to eps.

A test that claims bit-identity (resume, determinism, one seed twice) compares two runs on the same
machine and stays exact (``==``). ``.ci/run`` runs the tests marked ``numerics`` a second time on
another kernel path (docs/testing.md).
"""
from __future__ import annotations

import torch

#: rounding slack, in units of ``eps(dtype)`` at the values' scale. A forward pass here chains a few
#: hundred-term dot products through 4 layers and a log-softmax; two summation orders measured within
#: 30 ulps of each other on the log-probs (default and AVX2 paths, AMD EPYC and Intel Xeon), and a real
#: bug (a shifted position, a missed temperature, a stale weight) moves them by 1e-3 or more
ULPS = 256
#: weights compared after the same optimizer steps may differ by this fraction of how far they moved
#: (measured: 0.2 % of the step for FSDP2 on one rank, 1.0 % for 2 replicate ranks against one process;
#: a missing gradient scale under FSDP2 put the weights 1.1e-3 away, more than the whole step)
STEP_FRACTION = 0.1


def _magnitude(values) -> float:
    if isinstance(values, torch.Tensor):
        return float(values.detach().abs().max()) if values.numel() else 0.0
    if isinstance(values, (int, float)):
        return abs(float(values))
    return max((_magnitude(v) for v in values), default=0.0)


def fp_tol(*values, dtype: torch.dtype = torch.float32, ulps: int = ULPS) -> float:
    """Absolute tolerance for two ``dtype`` computations of ``values`` (tensors, numbers or lists of
    either) that differ only in summation order: ``ulps · eps(dtype) · max(1, max |values|)``."""
    return ulps * torch.finfo(dtype).eps * max(1.0, _magnitude(values))


def update_tol(moved: float, fraction: float = STEP_FRACTION) -> float:
    """Tolerance for weights after the same optimizer steps on two paths: ``fraction`` of ``moved``,
    the largest distance a weight travelled from its start. ``moved`` must be non-zero: a test whose
    update did nothing proves nothing."""
    assert moved > 0, "the update did not move the weights"
    return fraction * moved
