"""The K-agent SAT-Seq trainer on verl's RayPPOTrainer.

HACPO's two-policy design (verl-recipe PR #148: each policy its own actor worker group, its own rollout
replicas, trained independently) generalised to K agents:

- ``init_workers``: verl's own ``RayPPOTrainer.init_workers`` once per agent, each time with the agent's
  ``actor_rollout_ref`` (``model.path`` = ``sat_seq.agents[k].path``) and its own resource pool: agent k
  gets an ActorRolloutRef worker group (:class:`~.workers.SatSeqActorRolloutRefWorker`: actor, its
  reference, its rollout), its rollout replicas, agent-loop manager and weight-sync (checkpoint) manager.
- the relay rollout (:meth:`relay_rollout`): agent 1 answers the prompt; agent k sees the prompt and the
  earlier agents' answers (satseq's relay prompt, ``satseq.workflows.prompts.ChatFormat.relay``); one row
  per agent turn, tagged with its agent and episode; the team reward is the last turn's score.
- the stage (:class:`~.stage_coordinator.SatSeqStageDriver`): the scheduler's order, the frozen agents,
  the truncated IS between agents, the quantile-KL line search; each agent's rows go to its own worker
  group only (this class is the driver's :class:`~.stage_coordinator.AgentOps`, through verl's
  ``_compute_old_log_prob`` / ``_update_actor`` with the agent's worker group in place).
- the certificate (:mod:`.monitor.certificate`): PAC lower bounds on the team's vote accuracy and episode
  reward from the relay episodes of the validation set, before the first stage, every ``sat_seq.certificate.every``
  stages and after the last.

What runs where: the driver, the registry functions and the stage logic run (and are tested) on CPU;
``init_workers``, ``relay_rollout`` and ``fit`` need verl's GPU workers (verl has no CPU platform).
"""
from __future__ import annotations

import contextlib
import copy
import uuid
from collections import Counter, defaultdict

import numpy as np
import torch
from omegaconf import OmegaConf, open_dict

from satseq.rewards.extract import extract_answer
from satseq.workflows.prompts import ChatFormat
from verl import DataProto
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.reward import extract_reward

from .monitor.certificate import certificate_metrics, certify, relay_scores
from .stage_coordinator import AGENT_KEY, EPISODE_KEY, SatSeqStageDriver, agent_names

_PER_AGENT = ("actor_rollout_wg", "ref_policy_wg", "async_rollout_manager", "checkpoint_manager",
              "llm_server_manager", "resource_pool_manager")


def agent_actor_rollout_ref(config, k: int):
    """Agent k's ``actor_rollout_ref``: the shared one with ``model.path`` = the agent's path (if set)."""
    cfg = copy.deepcopy(config.actor_rollout_ref)
    path = config.sat_seq.agents[k].get("path")
    if path:
        with open_dict(cfg):
            cfg.model.path = path
    return cfg


def relay_messages(messages, previous: list[tuple[str | None, str]], show_previous: str, budget: int):
    """Agent k's chat: the dataset's messages with the last user turn as satseq's relay prompt."""
    fmt = ChatFormat(None, template="raw", show_responses=show_previous == "responses", response_budget=budget,
                     hide_previous=show_previous == "none")
    out = [dict(m) for m in messages]
    last = max(i for i, m in enumerate(out) if m.get("role") == "user")
    out[last]["content"] = fmt.relay(str(out[last]["content"]), previous)
    return out


class SatSeqRayTrainer(RayPPOTrainer):
    """RayPPOTrainer with K agents, each in its own worker group (module docstring)."""

    def __init__(self, config, tokenizer, role_worker_mapping, resource_pool_managers: dict, **kwargs):
        self.agents = agent_names(config.sat_seq)
        missing = [n for n in self.agents if n not in resource_pool_managers]
        if missing:
            raise ValueError(f"sat_seq: no resource pool for agents {missing}")
        super().__init__(config, tokenizer, role_worker_mapping, resource_pool_managers[self.agents[0]], **kwargs)
        self.resource_pool_managers = resource_pool_managers
        self.per_agent: dict[str, dict] = {n: {} for n in self.agents}
        self.driver = SatSeqStageDriver(config, ops=self)
        self.cert_start = None

    # ------------------------------------------------------------------ workers, one group per agent
    def init_workers(self):
        shared = self.config
        for k, name in enumerate(self.agents):
            cfg = copy.deepcopy(shared)
            with open_dict(cfg):
                cfg.actor_rollout_ref = agent_actor_rollout_ref(shared, k)
            self.config, self.resource_pool_manager = cfg, self.resource_pool_managers[name]
            super().init_workers()
            self.per_agent[name] = {key: getattr(self, key, None) for key in _PER_AGENT}
        self.config = shared

    @contextlib.contextmanager
    def as_agent(self, name: str):
        """verl's single-policy helpers see agent ``name``'s worker groups while inside."""
        saved = {key: getattr(self, key, None) for key in _PER_AGENT}
        try:
            for key, value in self.per_agent[name].items():
                setattr(self, key, value)
            yield
        finally:
            for key, value in saved.items():
                setattr(self, key, value)

    # ------------------------------------------------------------------ AgentOps (the stage driver's)
    def _meta(self, data: DataProto) -> DataProto:
        """What RayPPOTrainer.fit puts in meta_info before its log-prob and update calls, for these rows."""
        data.meta_info["temperature"] = self.config.actor_rollout_ref.rollout.temperature
        data.meta_info["global_token_num"] = torch.sum(data.batch["attention_mask"], dim=-1).tolist()
        data.meta_info.setdefault("images_seqlens", [])
        return data

    def log_prob(self, name: str, data: DataProto) -> torch.Tensor:
        with self.as_agent(name):
            out, _ = self._compute_old_log_prob(self._meta(data))
        return out.batch["old_log_probs"]

    def update(self, name: str, data: DataProto) -> dict:
        with self.as_agent(name):
            out = self._update_actor(self._meta(data))
        return out.meta_info["metrics"]

    def set_beta(self, name: str, beta: float) -> None:
        self.per_agent[name]["actor_rollout_wg"].sat_seq_set_beta(beta)

    def snapshot(self, name: str) -> None:
        self.per_agent[name]["actor_rollout_wg"].sat_seq_snapshot()

    def set_step_scale(self, name: str, scale: float) -> None:
        self.per_agent[name]["actor_rollout_wg"].sat_seq_set_step_scale(scale)

    def restore(self, name: str) -> None:
        self.per_agent[name]["actor_rollout_wg"].sat_seq_restore()

    # ------------------------------------------------------------------ the relay rollout (GPU)
    def relay_rollout(self, batch: DataProto, sleep: bool = True) -> DataProto:
        """One relay episode per (prompt, sample): K turns, one row per turn (module docstring).
        ``sleep``: put each agent's rollout replicas to sleep after its turn (training follows); the
        certificate keeps them awake for the next stage's rollout."""
        s = self.config.sat_seq
        n = self.config.actor_rollout_ref.rollout.n
        batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch))], dtype=object)
        base = batch.repeat(repeat_times=n, interleave=True)
        episodes = np.array([f"{u}/{i % n}" for i, u in enumerate(base.non_tensor_batch["uid"])], dtype=object)
        previous: list[list[tuple[str | None, str]]] = [[] for _ in range(len(base))]
        rows = []
        for name in self.agents:
            turn = copy.deepcopy(base)
            turn.non_tensor_batch["raw_prompt"] = np.array(
                [relay_messages(m, previous[i], s.show_previous, s.previous_budget)
                 for i, m in enumerate(base.non_tensor_batch["raw_prompt"])], dtype=object)
            gen = self._get_gen_batch(turn)
            with self.as_agent(name):
                out = self.async_rollout_manager.generate_sequences(gen)
                if sleep:
                    self.checkpoint_manager.sleep_replicas()
            out.meta_info.pop("timing", None)
            turn = turn.union(out)
            texts = self.tokenizer.batch_decode(turn.batch["responses"], skip_special_tokens=True)
            for i, t in enumerate(texts):
                previous[i].append((extract_answer(t), t))
            turn.non_tensor_batch[AGENT_KEY] = np.array([name] * len(turn), dtype=object)
            turn.non_tensor_batch[EPISODE_KEY] = episodes
            rows.append(turn)
        data = DataProto.concat(rows)
        if "response_mask" not in data.batch.keys():
            from verl.trainer.ppo.ray_trainer import compute_response_mask

            data.batch["response_mask"] = compute_response_mask(data)
        reward, _ = extract_reward(data)
        data.batch["token_level_scores"] = data.batch["token_level_rewards"] = reward
        return data

    # ------------------------------------------------------------------ the certificate (GPU)
    def certify_relay(self, stage: int) -> dict:
        """satseq's PAC bounds on the team's vote accuracy and episode reward, from the relay episodes of
        the validation set (:func:`~.monitor.certificate.relay_scores`)."""
        cols: dict = defaultdict(list)
        for batch_dict in self.val_dataloader:
            data = self.relay_rollout(DataProto.from_single_dict(batch_dict), sleep=False)
            texts = self.tokenizer.batch_decode(data.batch["responses"], skip_special_tokens=True)
            cols["answers"] += [extract_answer(t) for t in texts]
            cols["agent"] += data.non_tensor_batch[AGENT_KEY].tolist()
            cols["episode"] += data.non_tensor_batch[EPISODE_KEY].tolist()
            cols["uid"] += data.non_tensor_batch["uid"].tolist()
            cols["ground_truth"] += [rm.get("ground_truth") for rm in data.non_tensor_batch["reward_model"]]
            cols["turn_reward"] += data.batch["token_level_scores"].sum(-1).tolist()
        scores = relay_scores(agents=self.agents, **cols)
        return certify(scores, float(self.config.sat_seq.certificate.delta))

    # ------------------------------------------------------------------ the loop (GPU)
    def fit(self):
        from verl.utils.tracking import Tracking

        logger = Tracking(project_name=self.config.trainer.project_name,
                          experiment_name=self.config.trainer.experiment_name,
                          default_backend=self.config.trainer.logger, config=OmegaConf.to_container(self.config))
        c = self.config.sat_seq.certificate
        for name in self.agents:
            with self.as_agent(name):
                self.checkpoint_manager.update_weights(0)
        self.cert_start = self.certify_relay(-1)
        stages = int(self.total_training_steps)
        batches = iter(self.train_dataloader)
        for stage in range(stages):
            try:
                batch_dict = next(batches)
            except StopIteration:
                batches = iter(self.train_dataloader)
                batch_dict = next(batches)
            data = self.relay_rollout(DataProto.from_single_dict(batch_dict))
            metrics = self.driver.run_stage(stage, data)
            counts = Counter(data.non_tensor_batch[AGENT_KEY].tolist())
            metrics.update({f"sat_seq/{n}/rows": counts.get(n, 0) for n in self.agents})
            metrics["critic/score/mean"] = float(data.batch["token_level_scores"].sum(-1).mean())
            for name in self.agents:  # the accepted (or restored) weights to the agent's rollout replicas
                with self.as_agent(name):
                    self.checkpoint_manager.update_weights(stage + 1)
            if stage == stages - 1 or (c.every > 0 and (stage + 1) % c.every == 0):
                metrics.update(certificate_metrics(self.certify_relay(stage), self.cert_start))
            logger.log(data=metrics, step=stage + 1)
            self.global_steps = stage + 1
