"""The ``apo`` config section: A*-PO stage 1 (V*) and stage 2 (regression)."""
from __future__ import annotations

from typing import Optional

from pydantic import Field

from satseq.config.section import Section


class APOConfig(Section):
    """``apo``: A*-PO's offline V* estimation (stage 1) and optimal-advantage regression (stage 2)."""

    n_samples: int = Field(8, ge=1, description="stage 1: reference samples per training prompt for V*")
    beta1: float = Field(0.5, description="stage 1: V* temperature (0 = mean reward, < 0 = V* is 0)")
    beta2: float = Field(1e-3, gt=0.0, description="stage 2: scale of log(pi/pi_ref) regressed onto r - V*")
    entropy_coef: float = Field(0.001, ge=0.0, description="stage 2: entropy bonus coefficient")
    filter_unsolvable: bool = Field(False, description="drop training prompts whose N reference samples all fail")
    vstar_cache: Optional[str] = Field(None, description="V* cache file (None = <run_dir>/vstar.json; made by `satseq vstar` or on first use)")
    mini_batch_size: int = Field(64, ge=1, description="sequences per optimizer step")
    epochs: int = Field(1, ge=1, description="stage 2: passes over each batch (the regression is valid off-policy: its targets do not depend on pi_theta)")
    loss: str = Field("apo", description="stage 2: regression loss from the registry (satseq.algos)")
    lr: float = Field(1e-6, gt=0.0, description="learning rate (AdamW; the official default for 1.5B-7B models)")
