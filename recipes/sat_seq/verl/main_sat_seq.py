"""Entry point: ``python -m recipes.sat_seq.main_sat_seq [hydra overrides]`` (from verl's checkout).

verl's ``main_ppo`` with the K-agent trainer: the recipe's config (``config/sat_seq.yaml`` on verl's
ppo_trainer), a Ray TaskRunner that maps the ActorRollout(Ref) role to
:class:`~.workers.SatSeqActorRolloutRefWorker`, gives each agent its own resource pool (the node's GPUs
split evenly: ``trainer.n_gpus_per_node // K`` per agent) and runs :class:`~.ray_trainer.SatSeqRayTrainer`.
Needs GPUs (verl has no CPU platform).
"""
from __future__ import annotations

import hydra
import ray
from omegaconf import OmegaConf

from satseq.errors import ConfigError
from verl.trainer.main_ppo import run_ppo
from verl.trainer.main_ppo_v0 import BaseTaskRunner
from verl.trainer.ppo.utils import create_rl_dataset, create_rl_sampler, need_critic, need_reference_policy
from verl.utils.config import validate_config

from .stage_coordinator import agent_names


def agent_pool_specs(config) -> dict[str, dict[str, list[int]]]:
    """Per agent, its resource-pool spec ``{"global_pool": [gpus] * nnodes}`` (an even split of each node)."""
    names = agent_names(config.sat_seq)
    per_agent = int(config.trainer.n_gpus_per_node) // len(names)
    if per_agent < 1:
        raise ConfigError(f"trainer.n_gpus_per_node={config.trainer.n_gpus_per_node} is fewer than the "
                          f"{len(names)} agents (each agent's worker group needs its own GPUs)")
    return {n: {"global_pool": [per_agent] * int(config.trainer.nnodes)} for n in names}


@ray.remote(num_cpus=1)
class SatSeqTaskRunner(BaseTaskRunner):
    def add_actor_rollout_worker(self, config):
        from verl.single_controller.ray import RayWorkerGroup

        from .workers import SatSeqActorRolloutRefWorker

        _, wg_cls = super().add_actor_rollout_worker(config)
        for role in list(self.role_worker_mapping):
            self.role_worker_mapping[role] = ray.remote(SatSeqActorRolloutRefWorker)
        return SatSeqActorRolloutRefWorker, wg_cls or RayWorkerGroup

    def run(self, config):
        from verl.trainer.ppo.ray_trainer import ResourcePoolManager
        from verl.utils.config import omega_conf_to_dataclass
        from verl.utils.dataset.rl_dataset import collate_fn
        from verl.workers.config import HFModelConfig

        from .ray_trainer import SatSeqRayTrainer

        OmegaConf.resolve(config)
        _, wg_cls = self.add_actor_rollout_worker(config)
        validate_config(config=config, use_reference_policy=need_reference_policy(config),
                        use_critic=need_critic(config))
        model_config: HFModelConfig = omega_conf_to_dataclass(config.actor_rollout_ref.model)
        tokenizer = model_config.tokenizer
        managers = {n: ResourcePoolManager(resource_pool_spec=spec, mapping=dict(self.mapping))
                    for n, spec in agent_pool_specs(config).items()}
        train = create_rl_dataset(config.data.train_files, config.data, tokenizer, model_config.processor,
                                  is_train=True)
        val = create_rl_dataset(config.data.val_files, config.data, tokenizer, model_config.processor,
                                is_train=False)
        trainer = SatSeqRayTrainer(config=config, tokenizer=tokenizer, processor=model_config.processor,
                                   role_worker_mapping=self.role_worker_mapping, resource_pool_managers=managers,
                                   ray_worker_group_cls=wg_cls, train_dataset=train, val_dataset=val,
                                   collate_fn=collate_fn, train_sampler=create_rl_sampler(config.data, train))
        trainer.init_workers()
        trainer.fit()


@hydra.main(config_path="config", config_name="sat_seq", version_base=None)
def main(config):
    if config.trainer.use_v1:
        raise ConfigError("trainer.use_v1: the SAT-Seq trainer is a RayPPOTrainer (set trainer.use_v1=false)")
    run_ppo(config, task_runner_class=SatSeqTaskRunner)


if __name__ == "__main__":
    main()
