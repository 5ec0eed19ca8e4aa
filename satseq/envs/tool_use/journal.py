"""Tool results recorded, so that a resumed run replays what the killed one saw.

A tool that reads the clock, ``/dev/urandom`` or a thread schedule may answer one call two ways. A
resumed stage samples its turns again; where a turn is the one sampled before the kill (the same
prompt ids and the same response ids, which a seeded stream gives as long as every earlier tool result
is the same), its calls take their recorded results instead of running again. Each result is one JSON
line of ``<run_dir>/tool_calls.jsonl`` (``tool_calls.rank<r>.jsonl`` under torchrun), keyed by the
SHA-256 of the turn's prompt and response ids, the call's index in the turn, the tool's name and its
arguments; a line cut by the kill is ignored.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Optional, Sequence


def call_key(prompt_ids: Sequence[int], response_ids: Sequence[int], index: int, name: str, arguments) -> str:
    h = hashlib.sha256()
    h.update(json.dumps([list(prompt_ids), list(response_ids), index, name, arguments], sort_keys=True,
                        default=str).encode())
    return h.hexdigest()


class ToolJournal:
    """``path`` None: nothing is recorded (``satseq eval``, held-out rollouts)."""

    def __init__(self, path: Optional[Path]):
        self.path = Path(path) if path is not None else None
        self.seen: dict[str, str] = {}
        if self.path is not None and self.path.is_file():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:  # the line the kill cut
                    continue
                self.seen[rec["key"]] = rec["result"]

    @classmethod
    def for_run(cls, run_dir: Path) -> "ToolJournal":
        rank = int(os.environ.get("RANK", "0") or 0)
        world = int(os.environ.get("WORLD_SIZE", "1") or 1)
        name = "tool_calls.jsonl" if world <= 1 else f"tool_calls.rank{rank}.jsonl"
        return cls(Path(run_dir) / name)

    def result(self, key: str, run) -> tuple[str, bool]:
        """The recorded result of call ``key``, else ``run()``'s, recorded; and whether it was replayed."""
        if key in self.seen:
            return self.seen[key], True
        out = run()
        self.seen[key] = out
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"key": key, "result": out}) + "\n")
        return out, False
