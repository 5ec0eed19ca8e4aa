"""Deterministic, resumable order over the training problems.

Epoch e visits the problems in ``randperm(n)`` drawn from a generator seeded by (seed, e); the
state is just (epoch, position), so a resumed run continues exactly where it stopped.
"""
from __future__ import annotations

import torch


class EpochSampler:
    def __init__(self, n: int, seed: int = 0):
        if n <= 0:
            raise ValueError("cannot sample from an empty dataset")
        self.n, self.seed = n, seed
        self.epoch, self.pos = 0, 0
        self._perm = self._permutation(0)

    def _permutation(self, epoch: int) -> list[int]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(self.n, generator=g).tolist()

    def next_batch(self, size: int) -> list[int]:
        out: list[int] = []
        while len(out) < size:
            if self.pos >= self.n:
                self.epoch, self.pos = self.epoch + 1, 0
                self._perm = self._permutation(self.epoch)
            take = min(size - len(out), self.n - self.pos)
            out.extend(self._perm[self.pos:self.pos + take])
            self.pos += take
        return out

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "pos": self.pos, "n": self.n, "seed": self.seed}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.pos = int(state["epoch"]), int(state["pos"])
        self._perm = self._permutation(self.epoch)
