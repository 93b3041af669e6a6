"""The building blocks of the EAGLE heads (:mod:`specdec.eagle.heads`): rotary embedding, attention with explicit
key/value state, MLP, and the EAGLE-1 and EAGLE-3 decoder layers; parameter names are the official checkpoint keys.

Shapes: ``B`` batch, ``T`` new positions, ``S`` attended positions (past + new), ``H`` head width,
``Hin`` attention input width (``H`` for EAGLE-1, ``2H`` for EAGLE-3), ``h_kv`` key/value heads, ``d`` head dim.
Attention state is explicit: every forward takes the keys/values of earlier positions (``past_kv``) and an additive
bias over all attended positions (built with :func:`specdec.attention.additive_mask`, as the target's masks are),
and returns the new keys/values.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers.activations import ACT2FN
from transformers.models.llama.modeling_llama import LlamaRMSNorm, apply_rotary_pos_emb

from specdec.attention import additive_mask
from specdec.eagle.config import EagleConfig

__all__ = ["KV", "KVSlots", "causal_bias", "EagleRotary", "EagleAttention", "EagleMLP", "Eagle1Layer", "Eagle3Layer"]

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

    def place(self, device: torch.device) -> None:
        """Keep the inverse frequencies on ``device`` (the head's), so that calls there copy nothing from the host.
        Called eagerly when the head moves (:meth:`EagleAttention._apply`), never inside a compiled step."""
        self.inv_freq = self.inv_freq.to(device)

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
        # Pure: no attribute is written here, since a compiled step that stored a tensor it made would keep a CUDA
        # graph's output, overwritten at the next replay (the 2026-11-30 GPU run). :meth:`place` moves it once.
        inv_freq = inv_freq.to(position_ids.device)
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

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> EagleAttention:
        """Moving the head (``.to(device)``, ``.cuda()``) moves its RoPE frequencies too, kept float32: the rotary is
        not a module, and a call on another device must not move them itself (:meth:`EagleRotary.__call__`)."""
        super()._apply(fn, recurse)
        tensor = next(iter((*self.parameters(), *self.buffers())), None)
        if tensor is not None:
            self.rotary.place(tensor.device)
        return self

    def forward(
        self,
        x: torch.Tensor,
        position_ids: torch.Tensor,
        attn_bias: torch.Tensor | Sequence[torch.Tensor],
        past_kv: KV | None = None,
        cache: KVSlots | Sequence[KVSlots] | None = None,
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
                row sees itself through its own slot (no concatenation, no copy of the past). Several caches (one per
                sequence, ``B = 1``): the ``T`` rows are theirs in order (``len(slots)`` each) and ``attn_bias`` is one
                bias per cache; each sequence's rows attend within its own cache only, while every projection runs
                once over all ``T`` rows (several sequences' draft steps in one forward).

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
        if cache is not None and past_kv is not None:
            raise ValueError("pass past_kv or cache, not both")
        if isinstance(cache, (list, tuple)):  # several sequences' rows: each attends within its own cache
            if b != 1 or len(attn_bias) != len(cache) or sum(c.slots.shape[0] for c in cache) != t:
                raise ValueError(f"{len(cache)} caches need B = 1, one bias each and T = their slots (got T={t})")
            ends = list(itertools.accumulate(c.slots.shape[0] for c in cache))
            parts = zip(cache, attn_bias, [0, *ends[:-1]], ends, strict=True)
            out = torch.cat(
                [self._attend(q[:, :, i:j], k[:, :, i:j], v[:, :, i:j], bias, None, c) for c, bias, i, j in parts],
                dim=2,
            )
        else:
            out = self._attend(q, k, v, attn_bias, past_kv, cache)
        out = out.transpose(1, 2).reshape(b, t, self.num_heads * self.head_dim)
        return self.o_proj(out), (k, v)

    def _attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        attn_bias: torch.Tensor,
        past_kv: KV | None,
        cache: KVSlots | None,
    ) -> torch.Tensor:
        """``q [B, h, T, d]`` over ``cat(past, k/v [B, h_kv, T, d])`` or the cache (written first): ``[B, h, T, d]``."""
        t = q.shape[2]
        if cache is not None:
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
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=attn_bias.to(q.dtype), enable_gqa=gqa)


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
        attn_bias: torch.Tensor | Sequence[torch.Tensor],
        past_kv: KV | None,
        cache: KVSlots | Sequence[KVSlots] | None = None,
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
        attn_bias: torch.Tensor | Sequence[torch.Tensor],
        past_kv: KV | None,
        cache: KVSlots | Sequence[KVSlots] | None = None,
    ) -> tuple[torch.Tensor, KV]:
        x = torch.cat((self.input_layernorm(input_embeds), self.hidden_norm(hidden)), dim=-1)
        attn, kv = self.self_attn(x, position_ids, attn_bias, past_kv, cache)
        h = hidden + attn
        return h + self.mlp(self.post_attention_layernorm(h)), kv
