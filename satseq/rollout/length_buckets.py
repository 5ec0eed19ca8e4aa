"""Rows of a trainer forward split into length buckets, so that padding costs little.

A batch of sampled responses is ragged: a GRPO group's answers run from 10 to 48 tokens, and a
reasoning batch's from a hundred to thousands. One padded ``[B, L_max]`` forward computes
``B · L_max`` token-positions for ``Σ_i L_i`` real ones (≈ 30 % padding on the embedded task). verl
removes the padding with flash-attention's variable-length kernels; on a CPU (SDPA, no varlen
kernel) the same saving comes from running rows of similar length together. With the lengths sorted
(``L_(1) ≤ … ≤ L_(B)``), contiguous buckets minimise::

    Σ_b  n_b · max_{i ∈ b} L_i  +  c · (#buckets)

where ``c`` is the fixed cost of one more decoder call in token-positions; a dynamic programme
over the sorted order finds the optimum exactly (O(B²), vectorised per bucket end):
``best[j] = min_{i < j} best[i] + (j − i) · L_(j) + c``.
"""
from __future__ import annotations

import torch

#: the cost of one more decoder call (and its backward), in token-positions, per device type. CPU: ≈ 2–3 ms
#: of per-call work on the embedded 4-layer model on one core, where a token-position costs ≈ 35 µs
#: forward; larger models pay relatively less per call, so this errs toward fewer buckets. Accelerators
#: (not measured here: no GPU was lent) launch kernels per call while a position costs almost nothing,
#: so there a bucket must save thousands of positions.
CALL_COST = {"cpu": 64}
ACCELERATOR_CALL_COST = 4096


def call_cost(device) -> int:
    """:data:`CALL_COST` for ``device`` (a ``torch.device`` or its name)."""
    return CALL_COST.get(torch.device(device).type, ACCELERATOR_CALL_COST)


def length_buckets(lengths: list[int], call_cost: int = CALL_COST["cpu"]) -> list[list[int]]:
    """Row indices grouped into buckets of similar length (each bucket in ascending length order),
    minimising the padded token-positions plus ``call_cost`` per bucket (:func:`call_cost`). One
    bucket when splitting saves nothing."""
    B = len(lengths)
    if B <= 1:
        return [list(range(B))]
    order = sorted(range(B), key=lambda i: lengths[i])
    L = torch.tensor([lengths[i] for i in order], dtype=torch.float64)
    best = torch.zeros(B + 1, dtype=torch.float64)
    start = [0] * (B + 1)
    idx = torch.arange(B + 1, dtype=torch.float64)
    for j in range(1, B + 1):
        # the last bucket holds sorted rows i..j-1, padded to L_(j-1)
        cost = best[:j] + (j - idx[:j]) * L[j - 1] + call_cost
        i = int(torch.argmin(cost))  # the first minimum: the largest bucket among equal costs
        best[j], start[j] = cost[i], i
    buckets, j = [], B
    while j > 0:
        buckets.append(order[start[j]:j])
        j = start[j]
    return buckets[::-1]

