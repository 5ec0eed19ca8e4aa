"""The library versions a run used (recorded in ``run_info.json``: the embedded warm start and its
figures depend on the exact floating-point path, so a result is only comparable with its versions)."""
from __future__ import annotations

import platform
from importlib import metadata

LIBRARIES = ("satseq", "torch", "transformers", "tokenizers", "peft", "math-verify", "sympy", "numpy")


def library_versions(names: tuple[str, ...] = LIBRARIES) -> dict[str, str]:
    """``{name: version}`` for ``names`` (default :data:`LIBRARIES`; ``"absent"`` when not installed), plus
    Python's."""
    out = {"python": platform.python_version()}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "absent"
    return out
