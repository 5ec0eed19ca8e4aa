"""Typed training configuration: schema, YAML loading with ``key.sub=value`` overrides, saving."""
from satseq.config.loader import dump_config, load_config, save_config
from satseq.config.schema import (
    AgentConfig,
    APOConfig,
    AlgorithmConfig,
    CertificateConfig,
    DataConfig,
    GRPOConfig,
    KLCtrlConfig,
    LoraConfig,
    ModelConfig,
    RewardConfig,
    RolloutConfig,
    SatSeqConfig,
    TrainConfig,
    TrainerConfig,
)

__all__ = [
    "AgentConfig", "APOConfig", "AlgorithmConfig", "CertificateConfig", "DataConfig", "GRPOConfig", "KLCtrlConfig",
    "LoraConfig", "ModelConfig", "RewardConfig", "RolloutConfig", "SatSeqConfig", "TrainConfig",
    "TrainerConfig", "dump_config", "load_config", "save_config",
]
