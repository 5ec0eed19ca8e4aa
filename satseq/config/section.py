"""The base of every config section (common and method-owned): typed, validated, strict."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

KLEstimator = Literal["exact", "k1", "k3"]


class Section(BaseModel):
    """Base for every config section: unknown keys are errors, assignments are re-validated."""

    model_config = ConfigDict(
        extra="forbid",
        validate_assignment=True,
        validate_default=True,
        coerce_numbers_to_str=True,  # `run_name: 2024` is the string "2024", not an error
    )
