"""Turn batches: the tokens of one role's turns, ready for a policy-gradient update.

Shared by every update scheme: pick the turns an agent took, attach each turn's advantage,
recompute log-probs with the agent's own model (the engine's behaviour log-probs are only a
cross-check), and iterate over shuffled mini-batches drawn from the run's generator.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from satseq.rollout.logprobs import response_logprobs
from satseq.workflows.episode import Episode


@dataclass
class TurnBatch:
    prompts: list[list[int]]
    responses: list[list[int]]
    episode: torch.Tensor        # [B] index of the episode each turn belongs to
    advantages: torch.Tensor     # [B] one advantage per turn (every token carries it)
    behaviour_logprobs: list[list[float]]

    def __len__(self) -> int:
        return len(self.prompts)

    def select(self, idx: torch.Tensor) -> "TurnBatch":
        ii = idx.tolist()
        return TurnBatch([self.prompts[i] for i in ii], [self.responses[i] for i in ii], self.episode[idx],
                         self.advantages[idx], [self.behaviour_logprobs[i] for i in ii])


def turns_of_role(episodes: list[Episode], role: str | list[str], advantages: torch.Tensor | None = None,
                  turn_index: int | None = None) -> TurnBatch:
    """All turns taken by ``role`` (or any of a list of roles); ``advantages[e, k]`` is looked up
    by episode and turn index."""
    roles = {role} if isinstance(role, str) else set(role)
    prompts, responses, eps, adv, beh = [], [], [], [], []
    for e, ep in enumerate(episodes):
        for t in ep.turns:
            if t.role not in roles or (turn_index is not None and t.index != turn_index):
                continue
            prompts.append(t.prompt_ids)
            responses.append(t.response_ids)
            eps.append(e)
            beh.append(t.behaviour_logprobs)
            adv.append(float(advantages[e, t.index]) if advantages is not None else 0.0)
    return TurnBatch(prompts, responses, torch.tensor(eps, dtype=torch.long), torch.tensor(adv), beh)


def batch_logprobs(model, batch: TurnBatch, pad_id: int, *, temperature: float, device, chunk: int = 64,
                   need_logits: bool = False, grad: bool = False):
    """Log-probs ``[B, R]`` (and full-vocab log-softmax if asked), computed in chunks without grad."""
    lps, masks, logits = [], [], []
    ctx = torch.enable_grad() if grad else torch.no_grad()
    with ctx:
        for s in range(0, len(batch), chunk):
            out = response_logprobs(model, batch.prompts[s:s + chunk], batch.responses[s:s + chunk], pad_id,
                                    temperature=temperature, device=device, return_logits=need_logits)
            lps.append(out[0])
            masks.append(out[1])
            if need_logits:
                logits.append(torch.log_softmax(out[2].float(), dim=-1))
    width = max(x.shape[1] for x in lps)
    pad = lambda x: torch.nn.functional.pad(x, (0, width - x.shape[1]))  # noqa: E731
    lp = torch.cat([pad(x) for x in lps])
    mask = torch.cat([pad(x) for x in masks])
    if not need_logits:
        return lp, mask
    lg = torch.cat([torch.nn.functional.pad(x, (0, 0, 0, width - x.shape[1])) for x in logits])
    return lp, mask, lg


def minibatch_indices(n: int, size: int, generator: torch.Generator) -> list[torch.Tensor]:
    perm = torch.randperm(n, generator=generator)
    return [perm[s:s + size] for s in range(0, n, size)]


def optimizer_step(opt: torch.optim.Optimizer, loss: torch.Tensor, params, grad_clip: float) -> float:
    """zero_grad → backward → clip the global grad norm (if ``grad_clip > 0``) → step; returns the loss."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(params, grad_clip)
    opt.step()
    return float(loss.detach())
