"""Typed training configuration: schema, YAML loading with ``key.sub=value`` overrides, saving.

A method's own section class lives in its package (``satseq.methods.<name>.config``)."""
from satseq.config.loader import dump_config, load_config, save_config
from satseq.config.schema import (
    AlgorithmConfig,
    DataConfig,
    KLCtrlConfig,
    LoraConfig,
    ModelConfig,
    PPOConfig,
    RewardConfig,
    RolloutConfig,
    TrainConfig,
    TrainerConfig,
)

__all__ = [
    "AlgorithmConfig", "DataConfig", "KLCtrlConfig", "LoraConfig", "ModelConfig", "PPOConfig", "RewardConfig",
    "RolloutConfig", "TrainConfig", "TrainerConfig", "dump_config", "load_config", "save_config",
]
