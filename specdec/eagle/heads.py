"""EAGLE-1 and EAGLE-3 draft heads as plain ``nn.Module`` s whose parameter names are the official checkpoint keys.

Shapes: ``B`` batch, ``T`` new positions, ``S`` attended positions (past + new), ``H`` head width,
``Hin`` attention input width (``H`` for EAGLE-1, ``2H`` for EAGLE-3), ``h_kv`` key/value heads, ``d`` head dim.

Both heads take their input embeddings from outside (``input_embeds``): normally the target's embedding, looked up
with :meth:`Eagle1Head.embed` / :meth:`Eagle3Head.embed`. Attention state is explicit: every forward takes the
keys/values of earlier positions (``past_kv``) and an additive bias over all attended positions (built with
:func:`specdec.attention.additive_mask`, as the target's masks are), and returns the new keys/values. Callers own
the cache (drafters keep preallocated buffers; training builds custom masks). Inference copies fuse projections
(:mod:`specdec.eagle.fusion`); checkpoints are read and written by :mod:`specdec.checkpoints`.

Positions: the pair (feature of token ``t``, token ``t+1``) sits at RoPE position ``t`` (the reference's
convention: pair index = position). A draft-tree node at depth ``k`` under a root pair at position ``r`` sits at
``r + k``. Training uses ``arange`` positions over pairs, so both agree; EAGLE-3 training-time-test step ``k``
uses ``t + k``.

One role, read top to bottom (the building blocks, then the two heads), which is why the file runs past ~450 lines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers.activations import ACT2FN
from transformers.models.llama.modeling_llama import LlamaRMSNorm, apply_rotary_pos_emb

from specdec.attention import additive_mask
from specdec.eagle.config import EagleConfig
from specdec.errors import SpecdecError

__all__ = [
    "KV",
    "KVSlots",
    "MissingEmbeddingError",
    "causal_bias",
    "EagleRotary",
    "EagleAttention",
    "EagleMLP",
    "Eagle1Layer",
    "Eagle3Layer",
    "Eagle1Head",
    "Eagle3Head",
    "scatter_vocab",
]

#: Keys and values of a span of positions: ``(k, v)``, each ``[B, h_kv, n, d]`` (keys already rotated).
KV = tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class KVSlots:
    """A preallocated key/value cache one forward writes into and attends over (inference; drafters own it).

    Attributes:
        keys, values: ``[B, h_kv, capacity, d]`` buffers (keys rotated), written in place.
        slots: ``[T]`` long: where the forward's ``T`` new rows go.
        span: the forward attends over slots ``[0, span)`` (the bias has ``span`` columns).
    """

    keys: torch.Tensor
    values: torch.Tensor
    slots: torch.Tensor
    span: int


class MissingEmbeddingError(SpecdecError, RuntimeError):
    """A head without its own ``embed_tokens`` was asked to embed tokens before a target embedding was attached."""


def causal_bias(
    t: int, past: int = 0, device: torch.device | str | None = None, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """``[1, 1, T, past + T]`` bias: every new position sees all ``past`` positions and the new ones up to itself."""
    rows = torch.arange(t, device=device)[:, None] + past
    cols = torch.arange(past + t, device=device)[None, :]
    return additive_mask(cols <= rows, dtype)


class EagleRotary:
    """RoPE cos/sin for explicit position ids (types: default, linear, dynamic NTK, llama3).

    Not an ``nn.Module``: the inverse frequencies stay float32 whatever dtype the head is cast to.
    Dynamic NTK rescales the base from the largest position in the call (keys cached earlier keep their rotation,
    as in the reference).
    """

    def __init__(self, config: EagleConfig) -> None:
        self.dim = config.head_dim
        self.base = config.rope_theta
        self.kind = config.rope_type
        self.scaling = dict(config.rope_scaling or {})
        self.max_positions = int(self.scaling.get("original_max_position_embeddings", config.max_position_embeddings))
        self.inv_freq = self._inv_freq(self.base)
        if self.kind == "linear":
            self.inv_freq = self.inv_freq / float(self.scaling["factor"])
        elif self.kind == "llama3":
            self.inv_freq = self._llama3(self.inv_freq)
        self._table: tuple[torch.Tensor, torch.Tensor] | None = None

    def cache(self, length: int, device: torch.device, dtype: torch.dtype) -> None:
        """Precompute ``cos``/``sin`` ``[length, d]`` so that calls look them up (two gathers instead of ~8 ops).

        Contract: later calls pass positions ``< length`` and ``dtype`` (the drafter that owns this head sizes the
        table to its key/value buffer, which bounds every position it uses). Dynamic NTK is never cached.
        """
        if self.kind == "dynamic" or (self._table is not None and self._table[0].shape[0] >= length):
            return
        self._table = None
        cos, sin = self(torch.arange(length, device=device)[None], dtype)
        self._table = (cos[0], sin[0])

    def _inv_freq(self, base: float) -> torch.Tensor:
        return 1.0 / (base ** (torch.arange(0, self.dim, 2, dtype=torch.float64) / self.dim)).float()

    def _llama3(self, inv_freq: torch.Tensor) -> torch.Tensor:
        factor = float(self.scaling["factor"])
        low, high = float(self.scaling.get("low_freq_factor", 1.0)), float(self.scaling.get("high_freq_factor", 4.0))
        old_len = float(self.scaling.get("original_max_position_embeddings", self.max_positions))
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
        return torch.where(medium, smoothed, scaled)

    def __call__(self, position_ids: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """``position_ids [B, T]`` -> ``(cos, sin)`` each ``[B, T, d]``."""
        if self._table is not None and self._table[0].dtype == dtype:
            return self._table[0][position_ids], self._table[1][position_ids]
        inv_freq = self.inv_freq
        if self.kind == "dynamic":
            seq_len = int(position_ids.max()) + 1
            if seq_len > self.max_positions:
                factor = float(self.scaling["factor"])
                base = self.base * ((factor * seq_len / self.max_positions) - (factor - 1)) ** (
                    self.dim / (self.dim - 2)
                )
                inv_freq = self._inv_freq(base)
        if inv_freq.device != position_ids.device:
            inv_freq = inv_freq.to(position_ids.device)
            if self.kind != "dynamic":
                self.inv_freq = inv_freq  # move once: a per-call host->device copy would sync every expand
        freqs = position_ids[..., None].float() * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)


class EagleAttention(nn.Module):
    """Grouped-query self-attention with RoPE and an explicit cache/mask API.

    Parameters ``q_proj``, ``k_proj``, ``v_proj`` (input ``Hin``, optional bias) and ``o_proj`` (no bias).
    """

    def __init__(self, config: EagleConfig, input_size: int) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.q_proj = nn.Linear(input_size, self.num_heads * self.head_dim, bias=config.qkv_bias)
        self.k_proj = nn.Linear(input_size, self.num_kv_heads * self.head_dim, bias=config.qkv_bias)
        self.v_proj = nn.Linear(input_size, self.num_kv_heads * self.head_dim, bias=config.qkv_bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=False)
        self.rotary = EagleRotary(config)
        self.qkv_proj: nn.Linear | None = None  # q/k/v stacked by eagle_fusion (inference copies only)

    def forward(
        self,
        x: torch.Tensor,
        position_ids: torch.Tensor,
        attn_bias: torch.Tensor,
        past_kv: KV | None = None,
        cache: KVSlots | None = None,
    ) -> tuple[torch.Tensor, KV]:
        """Attend from ``T`` new positions to ``cat(past, new)``, or to a preallocated cache's first ``span`` slots.

        Args:
            x: ``[B, T, Hin]``.
            position_ids: ``[B, T]`` long RoPE positions of the new rows.
            attn_bias: ``[B, 1, T, S]`` additive float (``0`` attend; ``-inf`` or the dtype's min not; every row sees
                at least one key). With ``past_kv``: ``S = past + T`` with the new positions last, in order. With
                ``cache``: ``S = cache.span``, columns = cache slots.
            past_kv: ``(k, v)`` each ``[B, h_kv, S - T, d]`` (rotated keys), or None.
            cache: preallocated keys/values; the new rows are written at ``cache.slots`` *before* attending, so a
                row sees itself through its own slot (no concatenation, no copy of the past).

        Returns:
            ``out [B, T, H]`` and the new ``(k, v)`` each ``[B, h_kv, T, d]`` (keys rotated).
        """
        b, t, _ = x.shape
        if self.qkv_proj is not None:
            kv = self.num_kv_heads * self.head_dim
            q, k, v = self.qkv_proj(x).split((self.num_heads * self.head_dim, kv, kv), dim=-1)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        q = q.reshape(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        k = k.reshape(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = v.reshape(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = self.rotary(position_ids, q.dtype)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        if cache is not None:
            if past_kv is not None:
                raise ValueError("pass past_kv or cache, not both")
            cache.keys.index_copy_(2, cache.slots, k)
            cache.values.index_copy_(2, cache.slots, v)
            keys, values = cache.keys[:, :, : cache.span], cache.values[:, :, : cache.span]
        elif past_kv is not None:
            keys, values = torch.cat((past_kv[0], k), dim=2), torch.cat((past_kv[1], v), dim=2)
        else:
            keys, values = k, v
        if attn_bias.shape[-1] != keys.shape[2] or attn_bias.shape[-2] != t:
            raise ValueError(f"attn_bias {tuple(attn_bias.shape)} does not match T={t}, S={keys.shape[2]}")
        gqa = self.num_heads != self.num_kv_heads  # SDPA shares each key/value head across its query group
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=attn_bias.to(q.dtype), enable_gqa=gqa)
        out = out.transpose(1, 2).reshape(b, t, self.num_heads * self.head_dim)
        return self.o_proj(out), (k, v)


class EagleMLP(nn.Module):
    """Llama gated MLP: ``down(act(gate(x)) * up(x))``, no biases."""

    def __init__(self, config: EagleConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.act = ACT2FN[config.hidden_act]
        self.gate_up_proj: nn.Linear | None = None  # gate/up stacked by eagle_fusion (inference copies only)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate_up_proj is not None:
            gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
            return self.down_proj(self.act(gate) * up)
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class Eagle1Layer(nn.Module):
    """EAGLE-1's decoder layer: like Llama's but **without** ``input_layernorm`` (layer 0 of the reference)."""

    def __init__(self, config: EagleConfig) -> None:
        super().__init__()
        self.self_attn = EagleAttention(config, config.hidden_size)
        self.mlp = EagleMLP(config)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(
        self,
        x: torch.Tensor,
        position_ids: torch.Tensor,
        attn_bias: torch.Tensor,
        past_kv: KV | None,
        cache: KVSlots | None = None,
    ) -> tuple[torch.Tensor, KV]:
        attn, kv = self.self_attn(x, position_ids, attn_bias, past_kv, cache)
        h = x + attn
        return h + self.mlp(self.post_attention_layernorm(h)), kv


class Eagle3Layer(nn.Module):
    """EAGLE-3's mid layer: attention over ``cat[input_layernorm(emb), hidden_norm(h)]`` (``2H``), residual ``h``."""

    def __init__(self, config: EagleConfig) -> None:
        super().__init__()
        self.self_attn = EagleAttention(config, 2 * config.hidden_size)
        self.mlp = EagleMLP(config)
        self.hidden_norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.input_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(
        self,
        input_embeds: torch.Tensor,
        hidden: torch.Tensor,
        position_ids: torch.Tensor,
        attn_bias: torch.Tensor,
        past_kv: KV | None,
        cache: KVSlots | None = None,
    ) -> tuple[torch.Tensor, KV]:
        x = torch.cat((self.input_layernorm(input_embeds), self.hidden_norm(hidden)), dim=-1)
        attn, kv = self.self_attn(x, position_ids, attn_bias, past_kv, cache)
        h = hidden + attn
        return h + self.mlp(self.post_attention_layernorm(h)), kv


class _HeadBase(nn.Module):
    """Embedding plumbing shared by both heads: own ``embed_tokens`` or an attached (shared) target embedding."""

    embed_tokens: nn.Embedding | None

    def __init__(self, config: EagleConfig, with_embedding: bool) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size) if with_embedding else None
        # A plain tensor attribute (not a Parameter): shares the target's storage, never saved or cast with the head.
        self.target_embedding: torch.Tensor | None = None

    def attach_target_embedding(self, weight: torch.Tensor) -> None:
        """Use the target's embedding ``[V, H]`` (shared, not copied) when the head has no ``embed_tokens``."""
        if tuple(weight.shape) != (self.config.vocab_size, self.config.hidden_size):
            raise ValueError(
                f"target embedding {tuple(weight.shape)} does not fit the head "
                f"(vocab_size {self.config.vocab_size}, hidden_size {self.config.hidden_size})"
            )
        self.target_embedding = weight.detach()

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """``[...]`` long token ids -> ``[..., H]`` embeddings in the head's dtype."""
        dtype = self.fc.weight.dtype
        if self.embed_tokens is not None:
            return self.embed_tokens(input_ids).to(dtype)
        if self.target_embedding is None:
            raise MissingEmbeddingError(
                "this head has no embed_tokens (it uses the target's): load it with load_eagle_head(..., "
                "target_model=...) or call attach_target_embedding(target.get_input_embeddings().weight)"
            )
        w = self.target_embedding
        return F.embedding(input_ids.to(w.device), w).to(device=self.fc.weight.device, dtype=dtype)


class Eagle1Head(_HeadBase):
    """EAGLE-1 / EAGLE-2 / HASS head: ``fc(cat[emb, feature])`` then one decoder layer without input norm.

    State-dict keys: ``[embed_tokens.weight]``, ``fc.weight`` ``[H, 2H]``, ``[fc.bias]``,
    ``layers.0.self_attn.{q,k,v,o}_proj.weight`` (+ q/k/v biases with ``qkv_bias``),
    ``layers.0.mlp.{gate,up,down}_proj.weight``, ``layers.0.post_attention_layernorm.weight``.
    No final norm and no lm_head: logits are the *target's* lm_head applied to the output.
    """

    kind = "eagle1"

    def __init__(self, config: EagleConfig, with_embedding: bool = False) -> None:
        super().__init__(config, with_embedding)
        h = config.hidden_size
        self.fc = nn.Linear(2 * h, h, bias=config.bias)
        self.layers = nn.ModuleList([Eagle1Layer(config)])

    def forward(
        self,
        input_embeds: torch.Tensor,
        features: torch.Tensor,
        position_ids: torch.Tensor,
        attn_bias: torch.Tensor,
        past_kv: KV | None = None,
        cache: KVSlots | None = None,
    ) -> tuple[torch.Tensor, KV]:
        """Predict the next feature for each (feature of token t, embedding of token t+1) pair.

        Args:
            input_embeds: ``[B, T, H]`` embeddings of tokens ``t+1``.
            features: ``[B, T, H]`` features of tokens ``t`` (target's post-norm last hidden state, or the head's
                own previous prediction).
            position_ids: ``[B, T]``; attn_bias: ``[B, 1, T, S]``; past_kv: ``(k, v)`` ``[B, h_kv, S-T, d]``;
            cache: or a preallocated cache (:class:`KVSlots`, see :meth:`EagleAttention.forward`).

        Returns:
            ``hidden [B, T, H]`` predicted features of tokens ``t+1`` and the new ``(k, v)`` ``[B, h_kv, T, d]``.
        """
        x = self.fc(torch.cat((input_embeds, features), dim=-1))
        return self.layers[0](x, position_ids, attn_bias, past_kv, cache)


class Eagle3Head(_HeadBase):
    """EAGLE-3 head: fused target states through ``fc``, one mid layer, own norm + lm_head over a draft vocab.

    State-dict keys: ``fc.weight`` ``[H, 3*H_t]``, ``midlayer.self_attn.{q,k,v}_proj.weight`` ``[*, 2H]``,
    ``midlayer.self_attn.o_proj.weight``, ``midlayer.mlp.{gate,up,down}_proj.weight``,
    ``midlayer.{hidden_norm,input_layernorm,post_attention_layernorm}.weight``, ``norm.weight``,
    ``lm_head.weight`` ``[V_draft, H]``, ``d2t`` int64 ``[V_draft]``, ``t2d`` bool ``[V]``, ``[embed_tokens.weight]``.
    """

    kind = "eagle3"
    d2t: torch.Tensor
    t2d: torch.Tensor

    def __init__(self, config: EagleConfig, with_embedding: bool = False, num_fused: int | None = None) -> None:
        super().__init__(config, with_embedding)
        h = config.hidden_size
        if num_fused is None:
            num_fused = len(config.aux_layer_ids) if config.aux_layer_ids else 3
        self.fc = nn.Linear(num_fused * config.target_hidden_size, h, bias=False)
        self.midlayer = Eagle3Layer(config)
        self.norm = LlamaRMSNorm(h, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(h, config.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(config.draft_vocab_size, dtype=torch.long))
        t2d = torch.zeros(config.vocab_size, dtype=torch.bool)
        t2d[: config.draft_vocab_size] = True
        self.register_buffer("t2d", t2d)

    @property
    def num_fused(self) -> int:
        """Number of fused target hidden states ``fc`` expects."""
        return self.fc.in_features // self.config.target_hidden_size

    def set_vocab_map(self, draft_to_target: torch.Tensor) -> None:
        """Set ``d2t``/``t2d`` from absolute target ids ``[V_draft]`` of the draft tokens (strictly increasing)."""
        ids = draft_to_target.to(device=self.d2t.device, dtype=torch.long)
        if ids.shape != self.d2t.shape:
            raise ValueError(f"draft_to_target {tuple(ids.shape)} must be [{self.d2t.shape[0]}]")
        if ids.numel() and (ids.min() < 0 or ids.max() >= self.config.vocab_size):
            raise ValueError(f"target ids must lie in [0, {self.config.vocab_size})")
        self.d2t.copy_(ids - torch.arange(ids.shape[0], device=ids.device))
        self.t2d.zero_()
        self.t2d[ids] = True

    def project(self, fused: torch.Tensor) -> torch.Tensor:
        """``[..., num_fused * H_t]`` concatenated target layer inputs (low -> high) -> ``[..., H]``."""
        return self.fc(fused.to(self.fc.weight.dtype))

    def forward(
        self,
        input_embeds: torch.Tensor,
        hidden: torch.Tensor,
        position_ids: torch.Tensor,
        attn_bias: torch.Tensor,
        past_kv: KV | None = None,
        cache: KVSlots | None = None,
    ) -> tuple[torch.Tensor, KV]:
        """One mid-layer step.

        Args:
            input_embeds: ``[B, T, H]`` embeddings of tokens ``t+1``.
            hidden: ``[B, T, H]`` either :meth:`project` of the fused target states at ``t``, or the head's own
                previous pre-norm output.
            position_ids: ``[B, T]``; attn_bias: ``[B, 1, T, S]``; past_kv: ``(k, v)`` ``[B, h_kv, S-T, d]``;
            cache: or a preallocated cache (:class:`KVSlots`, see :meth:`EagleAttention.forward`).

        Returns:
            ``out_prenorm [B, T, H]`` (feed :meth:`logits`, or back in as ``hidden`` for the next draft step) and the
            new ``(k, v)`` ``[B, h_kv, T, d]``.
        """
        return self.midlayer(input_embeds, hidden, position_ids, attn_bias, past_kv, cache)

    def logits(self, out_prenorm: torch.Tensor) -> torch.Tensor:
        """``[..., H]`` -> ``[..., V_draft]`` draft-vocab logits ``lm_head(norm(out))``."""
        return self.lm_head(self.norm(out_prenorm))

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        """Draft ids (any shape, long) -> target ids ``draft_ids + d2t[draft_ids]``."""
        return draft_ids + self.d2t[draft_ids]

    def target_logits(self, draft_logits: torch.Tensor) -> torch.Tensor:
        """``[..., V_draft]`` -> ``[..., V]`` float32, draft logits at their target ids, ``-inf`` elsewhere."""
        ids = torch.arange(self.config.draft_vocab_size, device=self.d2t.device) + self.d2t
        return scatter_vocab(draft_logits, ids, self.config.vocab_size)


def scatter_vocab(draft_logits: torch.Tensor, ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Draft-vocabulary logits ``[..., V_d]`` -> ``[..., V]`` float32 at target ids ``ids [V_d]``, ``-inf`` elsewhere.

    Contract: softmax of the result is the draft distribution q over the target vocabulary, exactly 0 off ``ids``.
    """
    out = draft_logits.new_full((*draft_logits.shape[:-1], vocab_size), float("-inf"), dtype=torch.float32)
    out[..., ids] = draft_logits.float()
    return out
