"""A lean forward for Llama-family decoders (Llama, Qwen2, SmolLM2) used by the rollout engine.

Why by hand (docs/design.md, "What is written by hand"): on a CPU, HF ``generate`` spends much of a
decode step outside the matmuls — three q/k/v and two gate/up projections where one each would do,
a growing ``DynamicCache`` re-concatenated every step, and a 1-query SDPA call that is slower than
two batched matmuls (44 ms vs ≈ 10 ms per SmolLM2 step in bf16; ../shared/notes). This module runs
the same mathematics with:

* fused weights per layer — ``W_qkv = [W_q; W_k; W_v]``, ``W_gu = [W_gate; W_up]`` — with every
  active peft LoRA adapter merged in (``W + (α/r)·B·A``), cast once to the rollout dtype and reused
  until a parameter changes (``Tensor._version`` of every parameter is the cache key);
* a preallocated KV cache ``[B, H_kv, P + T, d]`` per layer, written in place;
* decode attention as two batched matmuls over the grouped query heads
  (``softmax(q Kᵀ/√d + mask) V`` with ``q: [B, H_kv, H/H_kv, d]``), the softmax in fp32;
* RMSNorm ``x · rsqrt(mean(x²) + ε) · w`` in fp32 and RoPE from the model's own rotary module
  (so every rope-scaling variant transformers knows is respected).

The prefill uses SDPA with a causal + left-padding mask. In fp32 the log-probs equal the trainer's
full forward to ≤ 1e-5 (tests/test_fused_decode.py); in bf16 they are bf16 numbers, and the trainer
re-scores every rollout in its own precision (docs/performance.md).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

SUPPORTED = ("LlamaForCausalLM", "Qwen2ForCausalLM")


def _inner(model):
    """The transformers ``*ForCausalLM`` under a peft wrapper."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def supports(model) -> bool:
    """Whether the fused path can run ``model`` exactly (plain Llama/Qwen2 decoders, SiLU MLP, no
    sliding window, no logit soft-capping)."""
    inner = _inner(model)
    cfg = getattr(inner, "config", None)
    if type(inner).__name__ not in SUPPORTED or cfg is None:
        return False
    if getattr(cfg, "hidden_act", "silu") != "silu" or getattr(cfg, "use_sliding_window", False):
        return False
    return getattr(cfg, "final_logit_softcapping", None) is None


def _linear(m) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(weight, bias) of a ``Linear``, with the active, unmerged LoRA adapters of a peft layer added."""
    if hasattr(m, "base_layer") and hasattr(m, "get_delta_weight"):
        w = m.base_layer.weight
        if not getattr(m, "disable_adapters", False) and not getattr(m, "merged", False):
            for a in m.active_adapters:
                if a in m.lora_A:
                    w = w + m.get_delta_weight(a)
        return w, m.base_layer.bias
    return m.weight, m.bias


def _cat_bias(biases, outs, like):
    if all(b is None for b in biases):
        return None
    return torch.cat([b if b is not None else like.new_zeros(n) for b, n in zip(biases, outs)])


class FusedWeights:
    """Fused, cast weights of one model state (rebuilt when any parameter changes)."""

    def __init__(self, model, dtype: torch.dtype, pack_rows: int | None = None, gemm: str = "auto"):
        """``pack_rows``: the decode batch the packed GEMM weights are laid out for (None: no packing);
        ``gemm``: the decode GEMM kernel (``rollout.decode_gemm``; :func:`resolve_gemm`)."""
        inner = _inner(model)
        cfg = inner.config
        self.dtype = dtype
        self.heads = cfg.num_attention_heads
        self.kv_heads = getattr(cfg, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.eps = cfg.rms_norm_eps
        self.rotary = inner.model.rotary_emb
        kernel = resolve_gemm(gemm, dtype, inner.device)
        self.gemm = kernel
        rows = pack_rows if kernel != "torch" else None
        with torch.no_grad():
            self.embed = inner.model.embed_tokens.weight.to(dtype)
            self.layers = []
            for layer in inner.model.layers:
                att, mlp = layer.self_attn, layer.mlp
                qkv = [_linear(att.q_proj), _linear(att.k_proj), _linear(att.v_proj)]
                gu = [_linear(mlp.gate_proj), _linear(mlp.up_proj)]
                w_qkv = torch.cat([w for w, _ in qkv]).to(dtype)
                w_gu = torch.cat([w for w, _ in gu]).to(dtype)
                self.layers.append(dict(
                    ln1=layer.input_layernorm.weight.float(), ln2=layer.post_attention_layernorm.weight.float(),
                    qkv=Lin(w_qkv, _maybe(_cat_bias([b for _, b in qkv], [w.shape[0] for w, _ in qkv], w_qkv), dtype),
                            rows, kernel),
                    o=Lin(*[_maybe(t, dtype) for t in _linear(att.o_proj)], rows, kernel),
                    gu=Lin(w_gu, _maybe(_cat_bias([b for _, b in gu], [w.shape[0] for w, _ in gu], w_gu), dtype),
                           rows, kernel),
                    down=Lin(*[_maybe(t, dtype) for t in _linear(mlp.down_proj)], rows, kernel)))
            self.norm = inner.model.norm.weight.float()
            self.head = Lin(*[_maybe(t, dtype) for t in _linear(inner.lm_head)], rows, kernel)
        self.q_size = self.heads * self.head_dim
        self.kv_size = self.kv_heads * self.head_dim
        self.inter = self.layers[0]["gu"].w.shape[0] // 2

    # ------------------------------------------------------------------ building blocks
    def rms(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * w).to(self.dtype)

    def rope(self, x: torch.Tensor, positions: torch.Tensor):
        cos, sin = self.rotary(x, positions)
        return cos.to(self.dtype)[:, None], sin.to(self.dtype)[:, None]

    @staticmethod
    def rotate(x, cos, sin):
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin

    def mlp(self, h: torch.Tensor, L: dict, decode: bool) -> torch.Tensor:
        g, u = L["gu"](h, decode).split(self.inter, dim=-1)
        return L["down"](F.silu(g) * u, decode)

    def logits(self, x_last: torch.Tensor, decode: bool) -> torch.Tensor:
        return self.head(self.rms(x_last, self.norm), decode)

    def split_qkv(self, qkv, B, T):
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        return (q.view(B, T, self.heads, self.head_dim).transpose(1, 2),
                k.view(B, T, self.kv_heads, self.head_dim).transpose(1, 2),
                v.view(B, T, self.kv_heads, self.head_dim).transpose(1, 2))


def _maybe(t, dtype):
    return None if t is None else t.to(dtype)


#: decode GEMM kernels (``rollout.decode_gemm``): MKL's packed GEMM, oneDNN's packed linear, ``F.linear``
GEMMS = ("mkl", "onednn", "torch")


def _mkl_packs(dtype: torch.dtype, device) -> bool:
    """Whether MKL's packed-weight GEMM is there: fp32 on a CPU build with MKL (x86 wheels)."""
    return (dtype == torch.float32 and torch.device(device).type == "cpu" and torch.backends.mkl.is_available()
            and hasattr(torch.ops.mkl, "_mkl_reorder_linear_weight"))


_ONEDNN: dict[torch.dtype, bool] = {}


def _onednn_packs(dtype: torch.dtype, device) -> bool:
    """Whether oneDNN's packed linear runs here in ``dtype`` (bf16 needs CPU support, e.g. AVX-512 BF16):
    tried once per dtype on a small weight."""
    if torch.device(device).type != "cpu" or not torch.backends.mkldnn.is_available() \
            or not hasattr(torch.ops.mkldnn, "_reorder_linear_weight"):
        return False
    if dtype not in _ONEDNN:
        try:
            w = torch.zeros(8, 8, dtype=dtype)
            packed = torch.ops.mkldnn._reorder_linear_weight(w, 2)
            torch.ops.mkldnn._linear_pointwise(torch.zeros(2, 8, dtype=dtype), packed, None, "none", [], "")
            _ONEDNN[dtype] = True
        except (RuntimeError, NotImplementedError):
            _ONEDNN[dtype] = False
    return _ONEDNN[dtype]


def available_gemms(dtype: torch.dtype, device) -> list[str]:
    """The decode GEMM kernels this build runs in ``dtype`` on ``device``; the default (what ``auto``
    is without a measurement) first."""
    out = (["mkl"] if _mkl_packs(dtype, device) else []) + (["onednn"] if _onednn_packs(dtype, device) else [])
    return out + ["torch"]


def resolve_gemm(gemm: str, dtype: torch.dtype, device) -> str:
    """``rollout.decode_gemm`` for these weights: ``auto`` = the default of :func:`available_gemms`
    (MKL's packed GEMM where there is one, as before the setting existed); a kernel this build lacks
    for ``dtype`` on ``device`` (a GPU: no packing) decodes through ``F.linear``."""
    avail = available_gemms(dtype, device)
    if gemm == "auto":
        return avail[0]
    if gemm not in GEMMS:
        raise ValueError(f"unknown decode GEMM kernel {gemm!r} (known: auto, {', '.join(GEMMS)})")
    return gemm if gemm in avail else "torch"


class Lin:
    """``y = x Wᵀ + b``. Decode calls (few rows) go through a packed-weight kernel, the weight reordered
    once for it (what inductor's CPU freezing does):

    * ``mkl``: MKL's packed GEMM (``torch.ops.mkl._mkl_reorder_linear_weight`` / ``_mkl_linear``),
      bit-identical to ``F.linear``; 1.5–1.8× ``F.linear`` at 32 rows on an Intel Xeon;
    * ``onednn``: oneDNN's packed linear (``torch.ops.mkldnn._reorder_linear_weight`` /
      ``_linear_pointwise``), equal to ``F.linear`` up to rounding and the same for a row whatever the
      other rows; 1.4× MKL's packed GEMM over a SmolLM2 rollout on an AMD EPYC (docs/results.md);
    * ``torch`` (or ``pack_rows`` None): ``F.linear``.

    Prefill calls (many rows) always use ``F.linear`` (tests/test_fused_decode.py; bench/rollout/throughput.py kernels)."""

    def __init__(self, w: torch.Tensor, b: torch.Tensor | None, pack_rows: int | None, kernel: str = "mkl"):
        self.w, self.b = w, b
        self.kernel = kernel if pack_rows else "torch"
        self.rows = pack_rows
        if self.kernel == "mkl":
            self.packed = torch.ops.mkl._mkl_reorder_linear_weight(w, pack_rows)
        elif self.kernel == "onednn":
            self.packed = torch.ops.mkldnn._reorder_linear_weight(w, pack_rows)
        else:
            self.packed = None

    def __call__(self, x: torch.Tensor, decode: bool = False) -> torch.Tensor:
        if decode and self.kernel == "mkl":
            return torch.ops.mkl._mkl_linear(x, self.packed, self.w, self.b, self.rows)
        if decode and self.kernel == "onednn":
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.b, "none", [], "")
        return F.linear(x, self.w, self.b)


#: the fewest tokens of a common header worth prefilling once (below it, the prompts go through whole)
MIN_SHARED_PREFIX = 16


def common_prefix(ids: torch.Tensor, mask: torch.Tensor) -> int:
    """How many leading real tokens every left-padded prompt of ``ids`` shares, at most each prompt's
    length minus one (every prompt keeps a token of its own, whose logits start its answer)."""
    lengths = mask.sum(1)
    P, n = ids.shape[1], int(lengths.min()) - 1
    if n <= 0:
        return 0
    rows = torch.stack([ids[u, P - int(lengths[u]): P - int(lengths[u]) + n] for u in range(len(ids))])
    same = (rows == rows[:1]).all(0)
    return n if bool(same.all()) else int((~same).nonzero()[0])


class FusedDecoder:
    """Prefill + step-by-step decode for one batch, with a preallocated KV cache.

    Rows with the same (padded) prompt — a GRPO group's samples, a relay's repeated problem — are
    prefilled once and their cache copied: the prefill costs the distinct prompts, not the rows. Distinct
    prompts that open with the same header of at least ``MIN_SHARED_PREFIX`` tokens (a few-shot prompt)
    prefill the header once (:meth:`_prefill_shared`)."""

    def __init__(self, w: FusedWeights, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor,
                 max_new_tokens: int):
        self.w = w
        B, P = ids.shape
        S = P + max_new_tokens
        dev = ids.device
        self.keys = [torch.empty(B, w.kv_heads, S, w.head_dim, dtype=w.dtype, device=dev) for _ in w.layers]
        self.values = [torch.empty_like(k) for k in self.keys]
        self.valid = torch.zeros(B, S, dtype=torch.bool, device=dev)
        self.valid[:, :P] = mask.bool()
        self.length = P
        self.scale = w.head_dim ** -0.5
        self.group = w.heads // w.kv_heads
        uniq, inverse = torch.unique(ids, dim=0, return_inverse=True)
        first = torch.full((len(uniq),), B, dtype=torch.long, device=dev).scatter_reduce(
            0, inverse, torch.arange(B, device=dev), reduce="amin")
        shared = common_prefix(ids[first], mask[first]) if len(first) > 1 else 0
        if shared >= MIN_SHARED_PREFIX:
            self._first = self._prefill_shared(ids[first], mask[first], positions[first], inverse, shared,
                                               max_new_tokens)
        else:
            self._first = self._prefill(ids[first], positions[first], self.valid[first, :P], inverse)

    def first_logits(self) -> torch.Tensor:
        return self._first

    def keep_rows(self, idx: torch.Tensor) -> None:
        """Keep only rows ``idx`` (the engine drops finished rows once half the batch is done, so a few
        long answers do not carry the finished rows' compute to the end)."""
        self.keys = [k.index_select(0, idx) for k in self.keys]
        self.values = [v.index_select(0, idx) for v in self.values]
        self.valid = self.valid.index_select(0, idx)

    @torch.no_grad()
    def _prefill(self, ids, positions, valid, rows) -> torch.Tensor:
        """Prefill the distinct prompts ``ids``; row r of the batch is distinct prompt ``rows[r]``."""
        P = ids.shape[1]
        causal = torch.ones(P, P, dtype=torch.bool, device=ids.device).tril()
        allowed = causal[None] & valid[:, None, :]
        allowed |= torch.eye(P, dtype=torch.bool, device=ids.device)[None]  # pad queries see themselves
        return self._run_block(ids, positions, allowed[:, None], rows, slot=0)

    @torch.no_grad()
    def _prefill_shared(self, ids, mask, positions, rows, shared: int, max_new_tokens: int) -> torch.Tensor:
        """Prefill distinct prompts that begin with the same ``shared`` tokens (a few-shot header): the
        header once, as one sequence, its keys and values copied to every row; then each prompt's rest,
        attending to the header and to itself. The cache then holds ``[header | left-padded rests]``:
        attention depends on positions (RoPE), not on cache slots, so this is the same computation as
        the whole prompts prefilled together, up to floating-point rounding (other GEMM shapes)."""
        U, P = ids.shape
        dev = ids.device
        lengths = mask.sum(1)
        starts = P - lengths  # left padding
        head_ids = ids[0, starts[0]: starts[0] + shared][None]
        self._run_block(head_ids, torch.arange(shared, device=dev)[None],
                        torch.ones(1, 1, shared, shared, dtype=torch.bool, device=dev).tril(),
                        torch.zeros(len(rows), dtype=torch.long, device=dev), slot=0)
        R = int((lengths - shared).max())  # the longest rest; rests are left-padded to R
        rest = torch.full((U, R), int(ids[0, -1]), dtype=ids.dtype, device=dev)
        rest_valid = torch.zeros(U, R, dtype=torch.bool, device=dev)
        for u in range(U):
            n = int(lengths[u]) - shared
            rest[u, R - n:] = ids[u, P - n:]
            rest_valid[u, R - n:] = True
        rest_pos = positions[:, P - R:]  # real tokens keep their positions (shared, shared + 1, ...)
        B, S = len(rows), self.keys[0].shape[2] - P + shared + R
        self.keys = [k[:, :, :S] for k in self.keys]  # the cache is now shared + R + max_new_tokens long
        self.values = [v[:, :, :S] for v in self.values]
        self.valid = torch.zeros(B, S, dtype=torch.bool, device=dev)
        self.valid[:, :shared] = True
        self.valid[:, shared: shared + R] = rest_valid[rows]
        self.length = shared + R
        causal = torch.ones(R, R, dtype=torch.bool, device=dev).tril() & rest_valid[:, None, :]
        causal |= torch.eye(R, dtype=torch.bool, device=dev)[None]  # pad queries see themselves
        allowed = torch.cat([torch.ones(U, R, shared, dtype=torch.bool, device=dev), causal], dim=2)
        return self._run_block(rest, rest_pos, allowed[:, None], rows, slot=shared)

    def _run_block(self, ids, positions, allowed, rows, slot: int) -> torch.Tensor:
        """Run ``ids`` ``[N, T]`` through the layers, attending to the cache's first ``slot`` slots (the
        same for every sequence: a shared header, taken from batch row 0) and to themselves under
        ``allowed`` ``[N, 1, T, slot + T]``; write their keys and values into slots ``slot:slot + T`` of
        the batch rows (row r gets sequence ``rows[r]``); return the batch's next-token logits."""
        w, (N, T) = self.w, ids.shape
        x = F.embedding(ids, w.embed)
        cos, sin = w.rope(x, positions)
        for i, L in enumerate(w.layers):
            q, k, v = w.split_qkv(L["qkv"](w.rms(x, L["ln1"])), N, T)
            q, k = w.rotate(q, cos, sin), w.rotate(k, cos, sin)
            self.keys[i][:, :, slot: slot + T] = k[rows]
            self.values[i][:, :, slot: slot + T] = v[rows]
            if slot:
                k = torch.cat([self.keys[i][:1, :, :slot].expand(N, -1, -1, -1), k], dim=2)
                v = torch.cat([self.values[i][:1, :, :slot].expand(N, -1, -1, -1), v], dim=2)
            if self.group > 1:
                k, v = k.repeat_interleave(self.group, dim=1), v.repeat_interleave(self.group, dim=1)
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=self.scale)
            x = x + L["o"](a.transpose(1, 2).reshape(N, T, w.q_size))
            x = x + w.mlp(w.rms(x, L["ln2"]), L, decode=False)
        return w.logits(x[:, -1], decode=True)[rows]

    @torch.no_grad()
    def step(self, tokens: torch.Tensor, positions: torch.Tensor, live: torch.Tensor) -> torch.Tensor:
        """Feed one token per row (``positions`` ``[B, 1]``; ``live`` marks rows whose token counts as
        context) and return the next logits ``[B, V]``."""
        w, B, s = self.w, tokens.shape[0], self.length
        self.valid[:, s] = live
        valid = self.valid[:, None, None, : s + 1]
        x = F.embedding(tokens[:, None], w.embed)
        cos, sin = w.rope(x, positions)
        for i, L in enumerate(w.layers):
            q, k, v = w.split_qkv(L["qkv"](w.rms(x, L["ln1"]), True), B, 1)
            q, k = w.rotate(q, cos, sin), w.rotate(k, cos, sin)
            self.keys[i][:, :, s: s + 1] = k
            self.values[i][:, :, s: s + 1] = v
            K, V = self.keys[i][:, :, : s + 1], self.values[i][:, :, : s + 1]
            qg = q.reshape(B, w.kv_heads, self.group, w.head_dim)
            scores = torch.matmul(qg, K.transpose(-1, -2)).float() * self.scale
            probs = scores.masked_fill(~valid, float("-inf")).softmax(-1).to(w.dtype)
            a = torch.matmul(probs, V).reshape(B, 1, w.q_size)
            x = x + L["o"](a, True)
            x = x + w.mlp(w.rms(x, L["ln2"]), L, decode=True)
        self.length = s + 1
        return w.logits(x[:, -1], decode=True)


class WeightCache:
    """The fused weights of the last model state used (one entry, so memory stays bounded: switching
    agents or an update rebuilds them, ≈ 0.1 s for SmolLM2-135M)."""

    def __init__(self):
        self._entries: dict[tuple, tuple[tuple, FusedWeights]] = {}

    def get(self, model, dtype: torch.dtype, rows: int | None = None, gemm: str = "auto") -> FusedWeights:
        inner = _inner(model)
        adapters = tuple(getattr(model, "active_adapters", ()) or ()) if hasattr(model, "get_base_model") else ()
        key = (id(inner), dtype, rows, gemm)
        sig = (adapters, tuple(p._version for p in inner.parameters()),
               tuple(id(p) for p in inner.parameters()))
        hit = self._entries.get(key)
        if hit is not None and hit[0] == sig:
            return hit[1]
        self._entries.clear()
        fw = FusedWeights(model, dtype, rows, gemm)
        self._entries[key] = (sig, fw)
        return fw
