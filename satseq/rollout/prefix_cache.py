"""Conversations continued from their cached keys and values: a turn prefills only what is new.

An interactive episode's turn ``k + 1`` prompt is turn ``k``'s prompt, the response as sampled and the
encoded new messages (:mod:`satseq.envs.conversation`). Full prefill runs the whole conversation through
the decoder every turn: ``Σ_k |prompt_k|`` token-positions over an episode, quadratic in its turns. Causal
attention makes a prefix's keys and values independent of what follows it, so a row whose prompt starts
with ids ``x_{<c}`` whose keys and values are kept needs only its suffix ``x_{c:}`` through the layers::

    K_l, V_l (positions < c)  from the previous turn     q, k, v (positions c..|x|-1)  computed now
    h_t = Σ_s softmax_s(q_t · k_s / √d) v_s  over s ≤ t (cached and new)

The kept ids of a row are its prompt and its response *but its last token* (whose keys and values the
decode never computed: it was sampled, not fed), so the next turn prefills the last sampled token and
the new messages. Positions stay those of the whole conversation (RoPE), as in full prefill.

:class:`PastStore` holds, per model state (parameters, adapters, dtype), the rows' ids and per-layer keys
and values, and finds for a prompt the longest kept ids that are a proper prefix of it. The store lives
for one rollout call of the interactive workflow (:func:`continuing`), so a run's tokens depend only on
its own episodes: a seeded run repeats, and a resumed one samples what it sampled. A row's entry is
dropped once a later turn continued it, and the oldest entries past ``budget_gb`` are dropped (those rows
prefill whole).

:class:`ContinuedDecoder` is the fused decode (:class:`satseq.rollout.fused_decode.FusedDecoder`) with such a
prefill: each row's kept keys and values are copied left-padded into the first ``C`` cache slots, its
suffix left-padded into the next ``T``; attention depends on positions, not slots. A batch without a kept
row is prefilled exactly as the fused decode does (the first turn is bit-identical to full prefill).
Later turns equal full prefill up to floating-point order (other GEMM shapes; the cached keys of sampled
tokens come from the decode's one-row GEMMs): the log-probs match the trainer's forward on the whole ids
within ``fp_tol`` and greedy ids match (tests/test_prefix_cache.py). Models the fused decode does not run
(other architectures, a quantized base, ``rollout.fused=false``) continue through their own forward:
:class:`ContinuedHFStepper` hands the kept rows to a ``DynamicCache`` the same way (left-padded, masked);
decoders with sliding-window layers (whose cache keeps only the window) prefill whole every turn.
"""
from __future__ import annotations

import copy
from collections import OrderedDict
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from transformers import DynamicCache

from satseq.rollout.fused_decode import FusedDecoder, FusedWeights
from satseq.rollout.hf_engine import _HFStepper, cache_layers, last_logits_only, pass_cache

#: tokens of a kept row's tail that index it (a lookup checks the whole prefix of a candidate)
_TAIL = 8


def model_state(model, dtype: torch.dtype) -> tuple:
    """What a row's keys and values depend on besides its ids: the model object, its parameters'
    versions (an update or a weight load bumps them), the active adapters, whether they are switched off
    or merged (a LoRA pool's reference policy: ``disable_adapter()``) and the rollout dtype."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    adapters = tuple(getattr(model, "active_adapters", ()) or ()) if hasattr(model, "get_base_model") else ()
    lora = tuple((bool(getattr(m, "disable_adapters", False)), bool(getattr(m, "merged", False)))
                 for m in inner.modules() if hasattr(m, "lora_A")) if adapters else ()
    params = list(inner.parameters())
    return (id(inner), dtype, adapters, lora, tuple(p._version for p in params), tuple(id(p) for p in params))


@dataclass
class Past:
    """One row's conversation so far: its ids and, per layer, keys and values ``[H_kv, n, d]``."""

    ids: tuple[int, ...]
    layers: list[tuple[torch.Tensor, torch.Tensor]]

    @property
    def nbytes(self) -> int:
        return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in self.layers)


class PastStore:
    """Kept rows of one rollout, keyed by (model state, ids); the oldest dropped past ``budget_gb``."""

    def __init__(self, budget_gb: float = 4.0):
        self.budget = int(budget_gb * 2 ** 30)
        self.entries: OrderedDict[tuple, Past] = OrderedDict()
        self._states: dict[tuple, int] = {}          # model state -> a small id (hashed once a batch)
        self._index: dict[tuple, list[tuple]] = {}   # (state id, length, last ids) -> entry keys
        self._lengths: dict[int, dict[int, int]] = {}  # state id -> {length kept: how many rows}
        self._bytes = 0
        self._used: set[tuple] = set()
        self._open: list["ContinuedDecoder"] = []
        self.hits = self.misses = 0
        self.tokens_reused = 0

    def state_id(self, state: tuple) -> int:
        """The id of a :func:`model_state` in this store."""
        return self._states.setdefault(state, len(self._states))

    def lookup(self, state: int, prompt: list[int]) -> Past | None:
        """The longest kept ids of state ``state`` (:meth:`state_id`) that are a proper prefix of ``prompt``
        (None: no such row)."""
        n = len(prompt)
        for length in sorted((L for L in self._lengths.get(state, ()) if L < n), reverse=True):
            for key in self._index.get((state, length, tuple(prompt[max(0, length - _TAIL): length])), ()):
                past = self.entries[key]
                if list(past.ids) == prompt[:length]:
                    self._used.add(key)
                    self.hits += 1
                    self.tokens_reused += length
                    return past
        self.misses += 1
        return None

    def put(self, state: int, past: Past) -> None:
        key = (state, past.ids)
        if key in self.entries:
            self._remove(key)
        self.entries[key] = past
        n = len(past.ids)
        self._index.setdefault((state, n, past.ids[max(0, n - _TAIL):]), []).append(key)
        counts = self._lengths.setdefault(state, {})
        counts[n] = counts.get(n, 0) + 1
        self._bytes += past.nbytes
        while self._bytes > self.budget and self.entries:
            self._remove(next(iter(self.entries)))

    def _remove(self, key: tuple) -> None:
        state, ids = key
        past = self.entries.pop(key)
        self._bytes -= past.nbytes
        slot = (state, len(ids), ids[max(0, len(ids) - _TAIL):])
        self._index[slot].remove(key)
        if not self._index[slot]:
            del self._index[slot]
        counts = self._lengths[state]
        counts[len(ids)] -= 1
        if not counts[len(ids)]:
            del counts[len(ids)]

    def decoder(self, model, weights: FusedWeights, ids, mask, positions, max_new_tokens):
        """The fused decoder of one batch, its rows' kept keys and values looked up (and registered, so
        that :meth:`collect` keeps what it decodes)."""
        state = self.state_id(model_state(model, weights.dtype))
        P = ids.shape[1]
        lengths = mask.sum(1).tolist()
        prompts = [ids[i, P - n:].tolist() for i, n in enumerate(lengths)]
        pasts = [self.lookup(state, p) for p in prompts]
        dec = ContinuedDecoder(weights, ids, mask, positions, max_new_tokens, prompts=prompts, pasts=pasts,
                               state=state, store=self)
        self._open.append(dec)
        return dec

    def stepper(self, model, ids, mask, positions):
        """The model's own forward for one batch (:class:`ContinuedHFStepper`), its rows' kept keys and
        values looked up and registered as :meth:`decoder`'s."""
        state = self.state_id(model_state(model, next(model.parameters()).dtype))
        P = ids.shape[1]
        prompts = [ids[i, P - n:].tolist() for i, n in enumerate(mask.sum(1).tolist())]
        pasts = [self.lookup(state, p) for p in prompts]
        step = ContinuedHFStepper(model, ids, mask, positions, prompts=prompts, pasts=pasts, state=state, store=self)
        self._open.append(step)
        return step

    def collect(self) -> None:
        """After a ``generate``: drop the rows continued by it, keep the rows it decoded."""
        for key in self._used:
            if key in self.entries:
                self._remove(key)
        self._used.clear()
        for dec in self._open:
            dec.keep_all()
        self._open.clear()


class ContinuedDecoder(FusedDecoder):
    """The fused decode of one batch whose rows may continue kept rows (``pasts[i]``: row ``i``'s kept
    ids and keys/values, or None); records the tokens it is fed, so the store can keep each row's
    conversation when the batch ends or the row is dropped."""

    def __init__(self, w: FusedWeights, ids, mask, positions, max_new_tokens: int, *, prompts: list[list[int]],
                 pasts: list[Past | None], state: int, store: PastStore):
        self.store, self.state = store, state
        self.row_ids = [list(p) for p in prompts]  # per decoder row: its prompt + the tokens fed since
        if all(p is None for p in pasts):
            super().__init__(w, ids, mask, positions, max_new_tokens)
            return
        self.w = w
        self.scale = w.head_dim ** -0.5
        self.group = w.heads // w.kv_heads
        self._first = self._prefill_continued(prompts, pasts, max_new_tokens, ids.device)

    @torch.no_grad()
    def _prefill_continued(self, prompts, pasts, max_new_tokens: int, dev) -> torch.Tensor:
        """Slots ``[C - c_i, C)``: row i's ``c_i`` kept keys/values; slots ``[C + T - s_i, C + T)``: its
        ``s_i`` new tokens, run through the layers at positions ``c_i .. c_i + s_i - 1``, attending to its
        kept slots and causally to each other. Returns the rows' next-token logits."""
        w, B = self.w, len(prompts)
        cached = [len(p.ids) if p is not None else 0 for p in pasts]
        new = [len(p) - c for p, c in zip(prompts, cached)]
        C, T = max(cached), max(new)
        S = C + T + max_new_tokens
        self.keys = [torch.zeros(B, w.kv_heads, S, w.head_dim, dtype=w.dtype, device=dev) for _ in w.layers]
        self.values = [torch.zeros_like(k) for k in self.keys]
        self.valid = torch.zeros(B, S, dtype=torch.bool, device=dev)
        suffix = torch.zeros(B, T, dtype=torch.long, device=dev)
        pos = torch.zeros(B, T, dtype=torch.long, device=dev)
        for i, (prompt, past, c, s) in enumerate(zip(prompts, pasts, cached, new)):
            if past is not None:
                for layer, (k, v) in enumerate(past.layers):
                    self.keys[layer][i, :, C - c: C] = k
                    self.values[layer][i, :, C - c: C] = v
                self.valid[i, C - c: C] = True
            suffix[i, T - s:] = torch.tensor(prompt[c:], dtype=torch.long)
            pos[i, T - s:] = torch.arange(c, c + s)
            self.valid[i, C + T - s: C + T] = True
        self.length = C + T
        causal = torch.ones(T, T, dtype=torch.bool, device=dev).tril() & self.valid[:, None, C: C + T]
        causal |= torch.eye(T, dtype=torch.bool, device=dev)[None]  # pad queries see themselves
        allowed = torch.cat([self.valid[:, None, :C].expand(B, T, C), causal], dim=2)[:, None]
        x = F.embedding(suffix, w.embed)
        cos, sin = w.rope(x, pos)
        for i, L in enumerate(w.layers):
            q, k, v = w.split_qkv(L["qkv"](w.rms(x, L["ln1"])), B, T)
            q, k = w.rotate(q, cos, sin), w.rotate(k, cos, sin)
            self.keys[i][:, :, C: C + T] = k
            self.values[i][:, :, C: C + T] = v
            K, V = self.keys[i][:, :, : C + T], self.values[i][:, :, : C + T]
            if self.group > 1:
                K, V = K.repeat_interleave(self.group, dim=1), V.repeat_interleave(self.group, dim=1)
            a = F.scaled_dot_product_attention(q, K, V, attn_mask=allowed, scale=self.scale)
            x = x + L["o"](a.transpose(1, 2).reshape(B, T, w.q_size))
            x = x + w.mlp(w.rms(x, L["ln2"]), L, decode=False)
        return w.logits(x[:, -1], decode=True)

    @torch.no_grad()
    def step(self, tokens: torch.Tensor, positions: torch.Tensor, live: torch.Tensor) -> torch.Tensor:
        for ids, t, alive in zip(self.row_ids, tokens.tolist(), live.tolist()):
            if alive:
                ids.append(t)
        return super().step(tokens, positions, live)

    def keep_rows(self, idx: torch.Tensor) -> None:
        keep = set(idx.tolist())
        for j in range(len(self.row_ids)):
            if j not in keep:
                self._keep(j)
        self.row_ids = [self.row_ids[j] for j in idx.tolist()]
        super().keep_rows(idx)

    def keep_all(self) -> None:
        """The batch is over: hand every remaining row to the store."""
        for j in range(len(self.row_ids)):
            self._keep(j)
        self.row_ids = []

    def _keep(self, j: int) -> None:
        """Row ``j``'s valid slots (its ids, in order) to the store."""
        n = self.length
        slots = self.valid[j, :n]
        layers = [(k[j, :, :n][:, slots], v[j, :, :n][:, slots]) for k, v in zip(self.keys, self.values)]  # copies
        assert layers[0][0].shape[1] == len(self.row_ids[j]), "kept slots and ids disagree"
        self.store.put(self.state, Past(tuple(self.row_ids[j]), layers))


def continues_with_own_forward(model) -> bool:
    """Whether a ``DynamicCache`` of ``model`` holds every position of every layer (no sliding-window layers:
    their cache keeps only the window), so kept rows can be handed back to it."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    cfg = getattr(inner, "config", None)
    if cfg is None:
        return False
    if getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True):
        return False
    return all(t == "full_attention" for t in (getattr(cfg, "layer_types", None) or ()))


class ContinuedHFStepper(_HFStepper):
    """:class:`ContinuedDecoder` through the model's own forward: the kept rows left-padded into a
    ``DynamicCache`` (``[B, H_kv, C, d]`` a layer, the padding masked out), the new tokens run after them
    with the attention mask ``[kept | new]`` and the conversation's positions. Without a kept row, the
    engine's own stepper (bit-identical to full prefill)."""

    def __init__(self, model, ids, mask, positions, *, prompts, pasts, state, store: PastStore):
        self.store, self.state = store, state
        self.row_ids = [list(p) for p in prompts]
        if all(p is None for p in pasts):
            super().__init__(model, ids, mask, positions)
            return
        dev, B = ids.device, len(prompts)
        cached = [len(p.ids) if p is not None else 0 for p in pasts]
        new = [len(p) - c for p, c in zip(prompts, cached)]
        C, T = max(cached), max(new)
        like = next(p for p in pasts if p is not None).layers
        self.cache = DynamicCache()
        kept = torch.zeros(B, C, dtype=torch.long, device=dev)
        for layer, (k0, v0) in enumerate(like):
            K = k0.new_zeros(B, k0.shape[0], C, k0.shape[2])
            V = v0.new_zeros(B, v0.shape[0], C, v0.shape[2])
            for i, (past, c) in enumerate(zip(pasts, cached)):
                if past is not None:
                    K[i, :, C - c:], V[i, :, C - c:] = past.layers[layer]
            self.cache.update(K.to(dev), V.to(dev), layer)
        suffix = torch.full((B, T), int(ids[0, -1]), dtype=torch.long, device=dev)
        pos = torch.zeros(B, T, dtype=torch.long, device=dev)
        new_mask = torch.zeros(B, T, dtype=torch.long, device=dev)
        for i, (prompt, c, n) in enumerate(zip(prompts, cached, new)):
            kept[i, C - c:] = 1
            suffix[i, T - n:] = torch.tensor(prompt[c:], dtype=torch.long)
            pos[i, T - n:] = torch.arange(c, c + n)
            new_mask[i, T - n:] = 1
        self.model, self.mask = model, torch.cat([kept, new_mask], dim=1)
        self._first = model(input_ids=suffix, attention_mask=self.mask, position_ids=pos, **pass_cache(model, self.cache),
                            use_cache=True, **last_logits_only(model)).logits[:, -1, :]

    def step(self, tokens, positions, live):
        for ids, t, alive in zip(self.row_ids, tokens.tolist(), live.tolist()):
            if alive:
                ids.append(t)
        return super().step(tokens, positions, live)

    def keep_all(self) -> None:
        """The batch is over: every row's unmasked cache slots (its ids, in order) to the store, where the
        cache holds every position of every layer (else nothing is kept)."""
        layers = cache_layers(self.cache)
        width = self.mask.shape[1]
        n_layers = getattr(getattr(self.model, "config", None), "num_hidden_layers", len(layers))
        if len(layers) != n_layers or any(k.dim() != 4 or k.shape[2] != width for k, _ in layers):
            self.row_ids = []
            return
        for j, ids in enumerate(self.row_ids):
            slots = self.mask[j].bool()
            self.store.put(self.state, Past(tuple(ids), [(k[j][:, slots], v[j][:, slots]) for k, v in layers]))
        self.row_ids = []


def continuing(engine):
    """The engine an interactive rollout samples its turns with: one that continues conversations from
    their kept keys and values where the engine can (:meth:`continuing` of satseq's engine with
    ``rollout.prefix_cache`` on), else ``engine`` itself (vLLM's prefix caching does this inside vLLM)."""
    make = getattr(engine, "continuing", None)
    return make() if callable(make) else engine


def continuing_view(engine, budget_gb: float):
    """A shallow copy of satseq's engine (its fused weights shared) with a fresh :class:`PastStore`."""
    view = copy.copy(engine)
    view.prefix_store = PastStore(budget_gb)
    return view
