"""The base of every config section (common and method-owned): typed, validated, strict."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator

KLEstimator = Literal["exact", "k1", "k3"]


class Section(BaseModel):
    """Base for every config section: unknown keys are errors, assignments are re-validated."""

    model_config = ConfigDict(
        extra="forbid",
        validate_assignment=True,
        validate_default=True,
        coerce_numbers_to_str=True,  # `run_name: 2024` is the string "2024", not an error
        allow_inf_nan=False,  # `A_clip: .inf`, `gamma: nan` are errors
    )

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_numbers(cls, value, info):
        """``gamma: yes`` / ``gamma=true`` is an error, not 1.0, for a key that takes a number."""
        if isinstance(value, bool) and info.field_name and _takes_number(cls.model_fields[info.field_name].annotation):
            raise ValueError(f"expected a number, got a boolean ({str(value).lower()})")
        if value is False and info.field_name and _takes_off(cls.model_fields[info.field_name].annotation):
            return "off"  # YAML reads `off` (and `no`) as false: `rollout.is_correction=off` means the choice "off"
        return value


def _takes_number(annotation) -> bool:
    """A field of type int or float (or Optional of them), but not one that also takes a bool."""
    import types
    import typing

    alts = [annotation]
    while any(typing.get_origin(a) in (typing.Union, types.UnionType) for a in alts):
        alts = [x for a in alts for x in (typing.get_args(a) if typing.get_origin(a) in (typing.Union, types.UnionType)
                                          else (a,))]
    return any(a in (int, float) for a in alts) and bool not in alts


def _takes_off(annotation) -> bool:
    """A choice among strings, one of which is "off" (and not a bool)."""
    import typing

    return typing.get_origin(annotation) is Literal and "off" in typing.get_args(annotation)



def turn_prompt(template, need: tuple[str, ...]):
    """A turn's exact-text prompt template (``pag.verify_prompt``, ``mlmt.coach_prompt``, ...): None, or
    a text containing every placeholder of ``need``; raises ValueError naming the missing ones."""
    if template is None:
        return template
    missing = [p for p in need if p not in template]
    if missing:
        raise ValueError(f"the template must contain {', '.join(need)}; missing {', '.join(missing)}")
    return template
