"""A*-PO stage 1: the optimal value V*(x), the solvable-prompt mask and the on-disk V* cache.

For a prompt x with N rewards r_1..r_N of responses sampled from pi_ref (spec ``apo_pag.md``,
"A*-PO", stage 1; arXiv 2505.20686 eq. for V* under the KL-regularised optimum)::

    V*(x) = beta1 * ln( (1/N) sum_i exp(r_i / beta1) )
          = beta1 * ( logsumexp_i(r_i / beta1) - ln N )          (computed this way: stable)

Edge cases, as the official code (ZhaolinGao/A-PO):

- ``beta1 == 0``: the plain mean of r (the beta1 -> infinity limit of the formula is also the
  mean; beta1 = 0 is simply the official switch for "use the mean");
- ``beta1 < 0``: V* = 0 for every prompt (no baseline);
- ``beta1 -> 0+`` the formula tends to max_i r_i, ``beta1 -> infinity`` to mean_i r_i.

The cache (:class:`VStarCache`) stores, per prompt, the id, the N rewards and V*, plus the
fingerprints of the dataset (:func:`fingerprint_problems`) and reference model
(:func:`fingerprint_model`) and N. :meth:`VStarCache.load` refuses a cache built for another
dataset, model or N with a one-line :class:`~satseq.errors.SatseqError`; a different beta1 needs
no new samples, so ``load(..., beta1=b)`` recomputes V* from the stored rewards instead.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Sequence

import torch
from torch import Tensor

from satseq.errors import SatseqError
from satseq.utils.io import write_json

CACHE_FORMAT = "satseq.vstar/1"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf")
_TAIL_BYTES = 1 << 20  # bytes hashed from the end of each weight file


def vstar_from_rewards(rewards: Tensor, beta1: float) -> Tensor:
    """``V*[p] = beta1 * (logsumexp(rewards[p] / beta1) - ln N)`` for ``rewards`` ``[P, N]``.

    ``beta1 == 0`` gives the mean over the N rewards, ``beta1 < 0`` gives zeros (official code).
    Stable for any reward scale (no explicit ``exp``). Integer/bool rewards are promoted to
    float64; floating rewards keep their dtype. Returns ``[P]``.
    """
    r = torch.as_tensor(rewards)
    if not r.is_floating_point():
        r = r.to(torch.float64)
    if r.dim() != 2 or r.shape[1] == 0:
        raise ValueError(f"rewards must be [P, N] with N >= 1, got shape {tuple(r.shape)}")
    beta1 = float(beta1)
    if beta1 < 0:
        return torch.zeros(r.shape[0], dtype=r.dtype, device=r.device)
    if beta1 == 0:
        return r.mean(dim=-1)
    return beta1 * (torch.logsumexp(r / beta1, dim=-1) - math.log(r.shape[1]))


def solvable_mask(rewards: Tensor, threshold: float = 0.0) -> Tensor:
    """Bool ``[P]``: prompts with at least one reward ``> threshold`` (``filter_unsolvable``)."""
    r = torch.as_tensor(rewards)
    if r.dim() != 2:
        raise ValueError(f"rewards must be [P, N], got shape {tuple(r.shape)}")
    return (r > threshold).any(dim=-1)


# ---------------------------------------------------------------- fingerprints


def _field(item: Any, name: str) -> Any:
    return item[name] if isinstance(item, dict) else getattr(item, name)


def fingerprint_problems(problems: Iterable[Any]) -> str:
    """sha256 hex of the ``(problem_id, problem, answer)`` of each item (``Problem`` or dict).

    Order-independent (the sorted per-item digests are hashed, with their count), so reshuffling a
    dataset keeps its cache valid while any added, removed or edited problem changes it. ``meta``
    is not included.
    """
    digests = []
    for p in problems:
        key = json.dumps([_field(p, "problem_id"), _field(p, "problem"), _field(p, "answer")],
                         default=str, ensure_ascii=False, sort_keys=True)
        digests.append(hashlib.sha256(key.encode("utf-8")).hexdigest())
    h = hashlib.sha256(f"problems:{len(digests)}\n".encode())
    for d in sorted(digests):
        h.update(d.encode() + b"\n")
    return h.hexdigest()


def _file_entry(h: "hashlib._Hash", f: Path) -> None:
    size = f.stat().st_size
    h.update(f"file:{f.name}:{size}\n".encode())
    with open(f, "rb") as fh:  # a content sample: same-shape checkpoints (fine-tunes) differ here
        fh.seek(max(0, size - _TAIL_BYTES))
        h.update(hashlib.sha256(fh.read()).digest())


def fingerprint_model(path_or_dir: str | os.PathLike) -> str:
    """sha256 hex identifying a model: for a local directory its ``config.json`` bytes and each
    top-level weight file's name, size and the sha256 of its last 1 MiB (cheap; tells a fine-tune
    from its base, whose files have the same names and sizes); for a single local file the same
    for that file; otherwise (a hub id) the sha256 of the string itself (revision not included).
    """
    p = Path(path_or_dir).expanduser()
    h = hashlib.sha256()
    if p.is_dir():
        h.update(b"dir\n")
        cfg = p / "config.json"
        h.update(b"config:" + (cfg.read_bytes() if cfg.is_file() else b"<none>") + b"\n")
        for f in sorted(p.iterdir(), key=lambda x: x.name):
            if f.is_file() and (f.name.endswith(WEIGHT_SUFFIXES) or f.name.endswith(".index.json")):
                _file_entry(h, f)
    elif p.is_file():
        h.update(b"single\n")
        _file_entry(h, p)
    else:
        h.update(b"hub:" + str(path_or_dir).encode("utf-8"))
    return h.hexdigest()


# ---------------------------------------------------------------- cache


def _id_key(pid: Any) -> str:
    # JSON form, so an id reads back equal after a round trip (tuples come back as lists).
    return json.dumps(pid, default=str, sort_keys=True)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


_RERUN = "rerun `satseq vstar` for the current dataset and reference model, or point to the matching cache"


@dataclass
class VStarCache:
    """Stage-1 output: per prompt the id, the N reference rewards and V*; plus provenance."""

    problem_ids: list[Any]
    rewards: list[list[float]]
    vstar: list[float]
    beta1: float
    n_samples: int
    dataset_fingerprint: str
    model_fingerprint: str
    created: str = field(default_factory=_now)

    @classmethod
    def build(cls, problem_ids: Sequence[Any], rewards: Tensor | Sequence[Sequence[float]], beta1: float, *,
              dataset_fingerprint: str, model_fingerprint: str) -> "VStarCache":
        """A cache from ``rewards`` ``[P, N]`` (V* computed in float64 by :func:`vstar_from_rewards`)."""
        r = torch.as_tensor(rewards, dtype=torch.float64)
        if r.dim() != 2 or r.shape[0] != len(problem_ids):
            raise ValueError(f"rewards must be [P={len(problem_ids)}, N], got shape {tuple(r.shape)}")
        return cls(problem_ids=list(problem_ids), rewards=r.tolist(), vstar=vstar_from_rewards(r, beta1).tolist(),
                   beta1=float(beta1), n_samples=int(r.shape[1]), dataset_fingerprint=dataset_fingerprint,
                   model_fingerprint=model_fingerprint)

    # -- queries

    def rewards_tensor(self, dtype: torch.dtype = torch.float64) -> Tensor:
        return torch.tensor(self.rewards, dtype=dtype).reshape(len(self.rewards), self.n_samples)

    def with_beta1(self, beta1: float) -> "VStarCache":
        """A copy with V* recomputed from the stored rewards for another ``beta1``."""
        return VStarCache(list(self.problem_ids), [list(r) for r in self.rewards],
                          vstar_from_rewards(self.rewards_tensor(), beta1).tolist(), float(beta1), self.n_samples,
                          self.dataset_fingerprint, self.model_fingerprint, self.created)

    def solvable_ids(self, threshold: float = 0.0) -> list[Any]:
        """Ids of prompts with at least one stored reward ``> threshold`` (``filter_unsolvable``)."""
        if not self.rewards:
            return []
        keep = solvable_mask(self.rewards_tensor(), threshold).tolist()
        return [pid for pid, k in zip(self.problem_ids, keep) if k]

    def vstar_for(self, problem_ids: Iterable[Any]) -> list[float]:
        """V* of each id, in order; an id not in the cache is a one-line SatseqError."""
        index = {_id_key(pid): v for pid, v in zip(self.problem_ids, self.vstar)}
        out = []
        for pid in problem_ids:
            try:
                out.append(index[_id_key(pid)])
            except KeyError:
                raise SatseqError(f"problem id {pid!r} is not in the V* cache; {_RERUN}") from None
        return out

    # -- file

    def to_dict(self) -> dict:
        return {"format": CACHE_FORMAT, "problem_ids": self.problem_ids, "rewards": self.rewards,
                "vstar": self.vstar, "beta1": self.beta1, "n_samples": self.n_samples,
                "dataset_fingerprint": self.dataset_fingerprint, "model_fingerprint": self.model_fingerprint,
                "created": self.created}

    def save(self, path: str | os.PathLike) -> None:
        """Write the cache as JSON, atomically (never a half-written file)."""
        write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | os.PathLike, *, dataset_fingerprint: str, model_fingerprint: str, n_samples: int,
             beta1: float | None = None) -> "VStarCache":
        """Read a cache and check it is for this dataset, model and N (one-line SatseqError if not).

        With ``beta1`` given and different from the stored one, V* is recomputed from the stored
        rewards (no new samples needed).
        """
        path = Path(path)
        if not path.is_file():
            raise SatseqError(f"{path}: no V* cache there; run `satseq vstar` first to build it")
        cache = cls._parse(path)
        diffs = []
        if cache.dataset_fingerprint != dataset_fingerprint:
            diffs.append(f"another dataset (fingerprint {cache.dataset_fingerprint[:12]}, "
                         f"current {dataset_fingerprint[:12]})")
        if cache.model_fingerprint != model_fingerprint:
            diffs.append(f"another model (fingerprint {cache.model_fingerprint[:12]}, "
                         f"current {model_fingerprint[:12]})")
        if cache.n_samples != int(n_samples):
            diffs.append(f"N={cache.n_samples} samples per prompt (current N={int(n_samples)})")
        if diffs:
            raise SatseqError(f"{path}: stale V* cache, built for {'; '.join(diffs)}; {_RERUN}")
        if beta1 is not None and float(beta1) != cache.beta1:
            cache = cache.with_beta1(beta1)
        return cache

    @classmethod
    def _parse(cls, path: Path) -> "VStarCache":
        def bad(why: str) -> SatseqError:
            return SatseqError(f"{path}: malformed V* cache ({why}); delete it and rerun `satseq vstar`")

        try:
            obj = json.loads(path.read_text(encoding="utf-8"))
        except UnicodeDecodeError:
            raise bad("not UTF-8 text") from None
        except json.JSONDecodeError as e:
            raise bad(f"invalid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
        if not isinstance(obj, dict):
            raise bad(f"expected a JSON object, got {type(obj).__name__}")
        if obj.get("format") != CACHE_FORMAT:
            raise bad(f"format {obj.get('format')!r}, expected {CACHE_FORMAT!r}")
        keys = ("problem_ids", "rewards", "vstar", "beta1", "n_samples", "dataset_fingerprint", "model_fingerprint")
        missing = [k for k in keys if k not in obj]
        if missing:
            raise bad(f"missing {', '.join(missing)}")
        ids, rewards, vstar, n = obj["problem_ids"], obj["rewards"], obj["vstar"], obj["n_samples"]
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise bad(f"n_samples {n!r} is not a positive integer")
        if not all(isinstance(x, list) for x in (ids, rewards, vstar)):
            raise bad("problem_ids, rewards and vstar must be lists")
        if not len(ids) == len(rewards) == len(vstar):
            raise bad(f"{len(ids)} ids, {len(rewards)} reward rows, {len(vstar)} V* values")

        def num(x: Any) -> bool:
            return isinstance(x, (int, float)) and not isinstance(x, bool)

        for i, row in enumerate(rewards):
            if not isinstance(row, list) or len(row) != n or not all(num(x) for x in row):
                raise bad(f"reward row {i} is not {n} numbers")
        if not all(num(v) for v in vstar):
            raise bad("vstar holds a non-number")
        if not num(obj["beta1"]):
            raise bad(f"beta1 {obj['beta1']!r} is not a number")
        for k in ("dataset_fingerprint", "model_fingerprint"):
            if not isinstance(obj[k], str):
                raise bad(f"{k} is not a string")
        return cls(problem_ids=ids, rewards=[[float(x) for x in row] for row in rewards],
                   vstar=[float(v) for v in vstar], beta1=float(obj["beta1"]), n_samples=n,
                   dataset_fingerprint=obj["dataset_fingerprint"], model_fingerprint=obj["model_fingerprint"],
                   created=str(obj.get("created", "")))
