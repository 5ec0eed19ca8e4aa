"""The registered sat_seq estimator and losses, called through verl's registries on verl's data, equal
satseq's formulas (and the K = 1 advantage equals verl's own GRPO)."""
import pytest

pytest.importorskip("verl", reason="verl is installed in .venv-verl (make setup-verl)")

import numpy as np
import torch

import recipes.sat_seq.verl  # noqa: F401  (registers)
from satseq.algos.kl import kl_penalty
from satseq.methods.sat_seq.adv.seqaware import seqaware_advantages
from satseq.methods.sat_seq.loss.seq_ratio_loss import seq_ratio_loss
from verl import DataProto
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.ray_trainer import compute_advantage
from verl.utils.config import omega_conf_to_dataclass


def _rows(E=6, K=3, T=7, groups=2, seed=0):
    """verl rows of E relay episodes x K turns, shuffled; reward on each response's last token."""
    g = torch.Generator().manual_seed(seed)
    r = torch.randint(0, 3, (E, K), generator=g).float() * 0.5
    group = torch.arange(E) % groups
    lengths = torch.randint(1, T + 1, (E * K,), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    rewards = torch.zeros(E * K, T)
    rewards[torch.arange(E * K), lengths - 1] = r.reshape(-1)
    perm = torch.randperm(E * K, generator=g)
    ep = (torch.arange(E * K) // K)[perm]
    turn = (torch.arange(E * K) % K)[perm]
    data = DataProto.from_single_dict({
        "token_level_rewards": rewards[perm], "response_mask": mask[perm],
        "uid": np.array([f"prompt-{int(group[e])}" for e in ep], dtype=object),
        "sat_seq_episode": np.array([f"ep-{int(e)}" for e in ep], dtype=object),
        "turn": turn.numpy()})
    return data, r, group, ep, turn


@pytest.mark.parametrize("gamma,lam,A_clip", [(0.99, 0.95, 5.0), (1.0, 1.0, 0.7), (0.5, 0.0, 5.0)])
def test_advantage_through_registry_equals_satseq(gamma, lam, A_clip):
    data, r, group, ep, turn = _rows()
    fn = core_algos.get_adv_estimator_fn("sat_seq")
    adv, ret = fn(token_level_rewards=data.batch["token_level_rewards"], response_mask=data.batch["response_mask"],
                  index=data.non_tensor_batch["uid"], config={"gamma": gamma, "lam": lam},
                  episode_index=data.non_tensor_batch["sat_seq_episode"], turn_index=data.non_tensor_batch["turn"],
                  A_clip=A_clip)
    # satseq's episodes in first-seen order of the rows (the estimator's episode codes)
    order = list(dict.fromkeys(ep.tolist()))
    ref = seqaware_advantages(r[order], group[order], gamma=gamma, lam=lam, A_clip=A_clip)
    code = torch.tensor([order.index(int(e)) for e in ep])
    m = data.batch["response_mask"]
    torch.testing.assert_close(adv, ref.normalized[code, turn].unsqueeze(-1) * m, rtol=0, atol=0)
    torch.testing.assert_close(ret, ref.returns[code, turn].unsqueeze(-1) * m, rtol=0, atol=0)
    assert adv.abs().max() <= A_clip and adv.abs().sum() > 0


def test_one_turn_advantage_via_verl_compute_advantage_equals_satseq_and_grpo(recipe_config):
    """verl's own compute_advantage (no episode structure) reaches the estimator: K = 1 per row."""
    data, r, group, ep, turn = _rows(E=12, K=1, groups=3, seed=1)
    out = compute_advantage(data, adv_estimator="sat_seq", config=recipe_config.algorithm)
    ref = seqaware_advantages(r, group, gamma=0.99, lam=0.95)
    m = data.batch["response_mask"]
    torch.testing.assert_close(out.batch["advantages"], ref.normalized[ep, 0].unsqueeze(-1) * m)
    grpo, _ = core_algos.compute_grpo_outcome_advantage(data.batch["token_level_rewards"], m,
                                                        data.non_tensor_batch["uid"])
    torch.testing.assert_close(out.batch["advantages"], grpo, rtol=1e-6, atol=1e-6)


def test_advantage_rejects_rows_without_a_consistent_episode():
    data, *_ = _rows()
    fn = core_algos.get_adv_estimator_fn("sat_seq")
    with pytest.raises(ValueError, match="share one"):
        fn(token_level_rewards=data.batch["token_level_rewards"], response_mask=data.batch["response_mask"],
           index=data.non_tensor_batch["uid"], episode_index=np.zeros(len(data), dtype=np.int64),
           turn_index=np.zeros(len(data), dtype=np.int64))


def _loss_inputs(B=8, T=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=g) * 2
    logp = (old + 0.3 * torch.randn(B, T, generator=g)).requires_grad_(True)
    adv = torch.randn(B, generator=g)[:, None].expand(B, T).clone()
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    lengths[-1] = 0  # an empty sequence counts for nothing
    mask = torch.arange(T)[None, :] < lengths[:, None]
    c = torch.rand(B, generator=g)
    return old, logp, adv * mask, mask, c[:, None] * mask


def _actor_config(recipe_config, **overrides):
    cfg = recipe_config.actor_rollout_ref.actor.copy()
    for k, v in overrides.items():
        node, key = (cfg, k) if "." not in k else (cfg[k.split(".")[0]], k.split(".")[1])
        node[key] = v
    return omega_conf_to_dataclass(cfg)


@pytest.mark.parametrize("mode,ratio", [("sat_seq", "sequence"), ("sat_seq_token", "token"),
                                        ("sat_seq_product", "product")])
def test_loss_through_registry_equals_satseq(recipe_config, mode, ratio):
    config = _actor_config(recipe_config, clip_ratio_low=0.15, clip_ratio_high=0.25,
                           **{"policy_loss.loss_mode": mode, "policy_loss.ppo_kl_coef": 0.3})
    old, logp, adv, mask, w = _loss_inputs()
    loss, metrics = core_algos.get_policy_loss_fn(mode)(
        old_log_prob=old, log_prob=logp, advantages=adv, response_mask=mask, loss_agg_mode=config.loss_agg_mode,
        config=config, rollout_is_weights=w)
    (g,) = torch.autograd.grad(loss, logp)
    logp2 = logp.detach().clone().requires_grad_(True)
    c = (w * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    ref, ref_m = seq_ratio_loss(logp2, old, adv, mask, clip_low=0.15, clip_high=0.25, is_weight=c,
                                kl=kl_penalty(logp2, old, "k3"), beta=0.3, ratio=ratio)
    (g_ref,) = torch.autograd.grad(ref, logp2)
    torch.testing.assert_close(loss, ref, rtol=0, atol=0)
    torch.testing.assert_close(g, g_ref, rtol=0, atol=0)
    assert metrics["actor/pg_clipfrac"] == ref_m["clipfrac"] and metrics["actor/sat_seq_beta"] == 0.3
    assert g.abs().sum() > 0


def test_loss_micro_batches_add_up_to_the_mini_batch(recipe_config):
    """With verl's global batch info (micro-batch losses are summed), the micro-batch losses sum to
    satseq's loss of the whole mini-batch."""
    config = _actor_config(recipe_config)
    old, logp, adv, mask, w = _loss_inputs(B=10, seed=3)
    n_seq = int((mask.sum(-1) > 0).sum())
    config.global_batch_info.update({"dp_size": 1, "global_batch_size": n_seq})
    fn = core_algos.get_policy_loss_fn("sat_seq")
    parts = [fn(old[s], logp[s], adv[s], mask[s], config.loss_agg_mode, config, w[s])[0]
             for s in (slice(0, 4), slice(4, 10))]
    c = (w * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    ref, _ = seq_ratio_loss(logp, old, adv, mask, clip_low=0.2, clip_high=0.2, is_weight=c,
                            kl=kl_penalty(logp, old, "k3"), beta=0.001)
    torch.testing.assert_close(parts[0] + parts[1], ref, rtol=1e-6, atol=1e-7)


def test_loss_refuses_token_mean_aggregation(recipe_config):
    from satseq.errors import ConfigError

    config = _actor_config(recipe_config, loss_agg_mode="token-mean")
    old, logp, adv, mask, w = _loss_inputs()
    with pytest.raises(ConfigError, match="seq-mean-token-mean"):
        core_algos.get_policy_loss_fn("sat_seq")(old, logp, adv, mask, config.loss_agg_mode, config, w)


def test_loss_through_verls_ppo_loss_on_its_tensordict(recipe_config):
    """verl's actor loss (verl.workers.utils.losses.ppo_loss, what the FSDP engine calls per micro-batch)
    with loss_mode=sat_seq, on the no-padding TensorDict verl builds from a DataProto: satseq's loss."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.losses import ppo_loss
    from verl.workers.utils.padding import left_right_2_no_padding

    B, P, T = 6, 3, 5
    g = torch.Generator().manual_seed(7)
    old, _, adv, mask, w = _loss_inputs(B=B, T=T, seed=7)
    mask[-1, 0] = True  # every row has a response token (verl's rows always do)
    adv, w = adv * mask, w * mask
    resp_len = mask.sum(-1)
    attention = torch.cat([torch.ones(B, P, dtype=torch.long), mask.long()], 1)
    ids = torch.randint(1, 50, (B, P + T), generator=g) * attention
    data = DataProto.from_single_dict({
        "prompts": ids[:, :P], "responses": ids[:, P:], "input_ids": ids, "attention_mask": attention,
        "position_ids": (attention.cumsum(-1) - 1).clamp(min=0), "response_mask": mask.long(),
        "old_log_probs": old, "advantages": adv, "rollout_is_weights": w})
    td = left_right_2_no_padding(data.to_tensordict())
    tu.assign_non_tensor(td, dp_size=1, batch_num_tokens=int(mask.sum()), global_batch_size=B)
    # the model's output per token of each (unpadded) sequence; position P-1+t carries response token t
    logp = (old + 0.3 * torch.randn(B, T, generator=g)) * mask
    per_row = []
    for b in range(B):
        x = torch.zeros(P + int(resp_len[b]))
        x[P - 1:P - 1 + int(resp_len[b])] = logp[b, :int(resp_len[b])]
        per_row.append(x)
    values = torch.cat(per_row).requires_grad_(True)
    nested = torch.nested.nested_tensor_from_jagged(values, offsets=td["input_ids"].offsets())
    config = _actor_config(recipe_config, **{"policy_loss.ppo_kl_coef": 0.2})
    loss, metrics = ppo_loss(config, {"log_probs": nested}, td)
    (g_verl,) = torch.autograd.grad(loss, values)

    lp = logp.clone().requires_grad_(True)
    c = (w * mask).sum(-1) / mask.sum(-1)
    ref, _ = seq_ratio_loss(lp, old, adv, mask, clip_low=0.2, clip_high=0.2, is_weight=c,
                            kl=kl_penalty(lp, old, "k3"), beta=0.2)
    (g_ref,) = torch.autograd.grad(ref, lp)
    torch.testing.assert_close(loss, ref, rtol=1e-6, atol=1e-7)
    got = torch.stack([torch.nn.functional.pad(g_verl[int(off) + P - 1:int(off) + P - 1 + int(n)], (0, T - int(n)))
                       for off, n in zip(td["input_ids"].offsets()[:-1], resp_len)])
    torch.testing.assert_close(got, g_ref * mask, rtol=1e-6, atol=1e-7)
    assert "actor/pg_loss" in metrics and g_ref.abs().sum() > 0
