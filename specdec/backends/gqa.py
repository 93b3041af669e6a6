"""Grouped-query attention without key/value copies, as a transformers attention function.

transformers' ``sdpa`` path repeats every layer's keys/values to all query heads before the kernel; SDPA's
``enable_gqa`` reads them as they are. Registered with transformers' ``AttentionInterface`` as ``"specdec_sdpa"``
(an addition to its registry; nothing else changes) and switched on per model by :func:`use_gqa_attention`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["GQA_ATTENTION", "set_attention", "use_gqa_attention"]

GQA_ATTENTION = "specdec_sdpa"


def _gqa_sdpa(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers attention function: SDPA with ``enable_gqa`` (keys/values stay ``[B, h_kv, S, d]``).

    Same contract as transformers' ``sdpa`` function for decoder self-attention (``query [B, h, T, d]``, an additive
    or boolean ``attention_mask [B, 1, T, S]`` or None, output ``[B, T, h, d]``); it refuses what it does not
    implement (soft-capping, position biases) instead of ignoring it.
    """
    for unsupported in ("softcap", "position_bias", "s_aux", "sinks"):
        if kwargs.get(unsupported) is not None:
            raise ValueError(f"the {GQA_ATTENTION!r} attention does not support {unsupported}; use attn 'sdpa'")
    t = query.shape[2]
    causal = bool(t > 1 and attention_mask is None and (is_causal if is_causal is not None else module.is_causal))
    if causal and key.shape[2] > t:  # a causal prefill attends over exactly its own t positions
        key, value = key[:, :, :t], value[:, :, :t]
    out = F.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attention_mask,
        dropout_p=dropout,
        scale=scaling,
        is_causal=causal,
        enable_gqa=query.shape[1] != key.shape[1],
    )
    return out.transpose(1, 2).contiguous(), None


def _register_gqa_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    if GQA_ATTENTION not in AttentionInterface._global_mapping:
        AttentionInterface.register(GQA_ATTENTION, _gqa_sdpa)
        AttentionMaskInterface.register(GQA_ATTENTION, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])


def set_attention(model: nn.Module, name: str) -> bool:
    config = getattr(model, "config", None)
    if config is None or not hasattr(model, "set_attn_implementation"):
        return False
    model.set_attn_implementation(name)
    return config._attn_implementation == name


def use_gqa_attention(model: nn.Module) -> str:
    """Switch an ``sdpa`` model to the copy-free GQA attention; returns the attention implementation now in force."""
    attention = getattr(getattr(model, "config", None), "_attn_implementation", "") or ""
    if attention in ("sdpa", GQA_ATTENTION):
        _register_gqa_attention()
        attention = GQA_ATTENTION if set_attention(model, GQA_ATTENTION) else attention
    return attention
