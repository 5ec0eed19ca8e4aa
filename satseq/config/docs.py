"""Render every config key (type, default, description) as Markdown: ``python -m satseq.config.docs``.

``docs/configuration.md`` is this output; a test keeps the two in sync.
"""
from __future__ import annotations

import json

from pydantic import BaseModel

from satseq.config.schema import TrainConfig


def _type_name(annotation) -> str:
    return str(annotation).replace("typing.", "").replace("<class '", "").replace("'>", "")


def _rows(model: type[BaseModel], prefix: str = ""):
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            yield from _rows(ann, key + ".")
            continue
        default = field.get_default(call_default_factory=True)
        if isinstance(default, BaseModel):
            default = default.model_dump(mode="json")
        elif isinstance(default, list):
            default = [d.model_dump(mode="json") if isinstance(d, BaseModel) else d for d in default]
        yield key, _type_name(ann), json.dumps(default), field.description or ""


def render_markdown() -> str:
    out = ["# Configuration", "",
           "Every key of a `satseq train` config: a YAML file plus `key.sub=value` overrides on the command",
           "line (`sat_seq.agents.0.path=/models/x` indexes lists). Unknown or ill-typed keys are rejected",
           "before anything runs, with a one-line error naming the key. This page is generated from",
           "`satseq/config/schema.py` by `python -m satseq.config.docs`.", "",
           "| key | type | default | meaning |", "|---|---|---|---|"]
    for key, typ, default, desc in _rows(TrainConfig):
        out.append(f"| `{key}` | {typ.replace('|', '∣')} | `{default}` | {desc.replace('|', '∣')} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(render_markdown(), end="")
