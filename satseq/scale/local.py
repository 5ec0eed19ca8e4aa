"""``local``: one process, nothing distributed (``trainer.backend=local`` without torchrun).

The strategy every other one must reproduce; its behaviour is :class:`satseq.strategy.Strategy`'s,
which this file registers under its name (``trainer.strategy=local`` may also be set explicitly)."""
from __future__ import annotations

from satseq.registry import register_strategy
from satseq.strategy import Strategy


@register_strategy
class Local(Strategy):
    name = "local"

    @classmethod
    def check_layout(cls, cfg, world: int) -> None:
        from satseq.errors import ConfigError
        from satseq.scale.fsdp import check_layout

        if world > 1:
            raise ConfigError(f"config key 'trainer.strategy': local runs in one process, and torchrun started {world} "
                              "ranks: set trainer.strategy=replicate or fsdp2")
        check_layout(cfg, world)
