"""Render every config key (type, default, description) as Markdown: ``python -m satseq.config.docs``.

``docs/configuration.md`` is this output; a test keeps the two in sync.
"""
from __future__ import annotations

import json

from pydantic import BaseModel

from satseq.config.schema import train_config_model


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


INPUT_RULES = """
## What inputs are refused

Every config and dataset reader is strict; each refusal is one line, `error: FILE:LINE: ...` (or
the config key), exit status 2, before any model call and before any output (`inference_config.yaml`,
the run directory) is written.

- **Any file**: bytes that are not UTF-8 text (gzip, zip, UTF-16/32, NUL bytes, invalid UTF-8).
  A UTF-8 byte-order mark and CRLF line ends are fine.
- **Datasets** (`.jsonl`, `.json`, `.parquet`): malformed JSON; duplicate keys in an object;
  `NaN`, `Infinity` and numbers that overflow (`1e400`); strings that are not valid Unicode (lone
  surrogates); a `problem`/`question`/`prompt` or `answer` that is not a string (`"answer": 27` is
  refused: write `"27"`), null or blank; a non-string or empty `id`; in the `prompt`/`chosen`/`rejected`
  format, a missing, non-string or empty `chosen` or `rejected`; duplicate problem ids. Extra fields
  are kept in `Problem.meta`.
- **Prompts too long**: a problem whose prompt plus `max_new_tokens` exceeds the model's context
  length (`max_position_embeddings`) is refused naming its `file:line`.
- **YAML configs**: duplicate keys; any tag (`!!python/...`, `!!binary`, `!custom`); aliases that
  expand past 10,000 nodes or refer to themselves; a YAML boolean (`yes`, `on`, `true`...) for a
  key that takes a number (`gamma: yes` → `algorithm.gamma: expected a number, got a boolean (yes)`);
  a non-finite number (`.inf`, `.nan`) for a numeric key. `key=value` overrides follow the same rules.
  Error messages show at most a few dozen characters of a value.
"""


def render_markdown() -> str:
    out = ["# Configuration", "",
           "Every key of a `satseq train` config: a YAML file plus `key.sub=value` overrides on the command",
           "line (`sat_seq.agents.0.path=/models/x` indexes lists). Unknown or ill-typed keys are rejected",
           "before anything runs, with a one-line error naming the key. This page is generated from",
           "`satseq/config/schema.py` (the common sections) and each method's section",
           "(`satseq/methods/<name>/config.py`, mounted by the method) by `python -m satseq.config.docs`.", "",
           "| key | type | default | meaning |", "|---|---|---|---|"]
    for key, typ, default, desc in _rows(train_config_model(builtin_only=True)):
        out.append(f"| `{key}` | {typ.replace('|', '∣')} | `{default}` | {desc.replace('|', '∣')} |")
    return "\n".join(out) + "\n" + INPUT_RULES


if __name__ == "__main__":
    print(render_markdown(), end="")
