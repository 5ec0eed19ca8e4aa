"""verl's ActorRolloutRefWorker with SAT-Seq's per-agent controls (one worker group per agent).

Four methods, dispatched to every rank of the agent's worker group (``Dispatch.ONE_TO_ALL``), give the
trainer the parameter side of the quantile-KL line search (``kl/quantile_kl_ctrl``) and the agent's beta:

- ``sat_seq_snapshot()``: keep theta_cur and the optimizer state (this rank's FSDP shards);
- ``sat_seq_set_step_scale(s)``: theta = theta_cur + s (theta_prop - theta_cur), optimizer = snapshot;
- ``sat_seq_restore()``: theta_cur and the optimizer state, bit for bit;
- ``sat_seq_set_beta(beta)``: the beta of the sat_seq loss (``policy_loss.ppo_kl_coef`` of the config the
  worker's loss function was built with; verl's config dataclasses are frozen, so it is set in place).

They need a GPU worker (verl's FSDP engine), so the CPU tests run the same
:class:`~.kl.quantile_kl_ctrl.StepSnapshot` on a plain module and the trainer on stub worker groups.
"""
from __future__ import annotations

from verl.single_controller.base.decorator import Dispatch, register
from verl.workers.engine_workers import ActorRolloutRefWorker

from .kl.quantile_kl_ctrl import StepSnapshot


class SatSeqActorRolloutRefWorker(ActorRolloutRefWorker):
    def _sat_seq_engine(self):
        engine = self.actor.engine
        return engine.module.parameters(), getattr(engine, "optimizer", None)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def sat_seq_snapshot(self):
        params, opt = self._sat_seq_engine()
        self._sat_seq_snap = StepSnapshot.take(params, opt)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def sat_seq_set_step_scale(self, scale: float):
        params, opt = self._sat_seq_engine()
        self._sat_seq_snap.set_step_scale(params, opt, float(scale))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def sat_seq_restore(self):
        params, opt = self._sat_seq_engine()
        self._sat_seq_snap.restore(params, opt)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def sat_seq_set_beta(self, beta: float):
        config = self.loss_fn.keywords["config"]  # functools.partial(ppo_loss, config=actor_config)
        object.__setattr__(config.policy_loss, "ppo_kl_coef", float(beta))
