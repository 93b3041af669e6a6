"""Grouped-query attention without key/value copies, as a transformers attention function.

transformers' ``sdpa`` path repeats every layer's keys/values to all query heads before the kernel; SDPA's
``enable_gqa`` reads them as they are. Registered with transformers' ``AttentionInterface`` as ``"specdec_sdpa"``
(an addition to its registry; nothing else changes) and switched on per model by :func:`use_gqa_attention`.

Row-invariant numerics (``"specdec_sdpa_invariant"``): the attention of a tree forward and of a 1-token step must
give a row the same bits, but SDPA's CPU kernels group their sums by the key length and by where masked slots fall
among the keys, and both differ between a 1-token step (keys ``[0, L]``) and a tree forward (keys ``[0, L + n)``,
siblings masked). In bfloat16 that last-bit difference becomes a whole bfloat16 ulp in some outputs of every layer.
The invariant form (:func:`_gqa_attention_invariant`) is a float32 softmax attention written so that no sum depends
on the number of rows or on where masked slots fall:

* the scores ``q @ k^T`` are a float32 GEMM over at least :data:`INVARIANT_MIN_ROWS` rows (zero rows pad a 1-token
  step): each score is one dot product over the head dimension, and MKL gave it the same bits for any number of rows
  from 4 up and any number of keys, while 1-3 rows ran another kernel;
* ``exp`` runs on whole vectors (keys padded to :data:`INVARIANT_KEY_ALIGN`), so every weight takes the same code
  path whatever its position; the row maximum is exact in any order;
* ``weights @ [values | 1]`` (the ones column gives the softmax's denominator) is a float64 GEMM. The sum over the
  keys is where the two forwards differ: MKL blocks it by the number of keys, so a key lands in another partial sum
  when the tree's extra slots push the count past a block boundary (measured: 192 against 256 keys). In float64 that
  moves the result by ~1e-16 relative, and rounding it to bfloat16 (or float32) gives the same value unless it lies
  that close to a rounding boundary: probability ~1e-13 per element in bfloat16, ~1e-9 in float32.

These are properties of the kernels measured here (MKL's GEMMs and torch's vectorised ``exp`` on AMD Zen 4), not
guarantees of their documentation; ``tests/test_invariant.py`` checks them bit for bit on SmolLM2 on whatever CPU
runs the suite. A causal prefill (no mask) runs the ordinary kernel: vanilla and speculative decoding share it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["GQA_ATTENTION", "GQA_INVARIANT", "GQA_NAMES", "set_attention", "use_gqa_attention"]

GQA_ATTENTION = "specdec_sdpa"
GQA_INVARIANT = "specdec_sdpa_invariant"
#: Both forms of the copy-free GQA attention.
GQA_NAMES = (GQA_ATTENTION, GQA_INVARIANT)
#: The invariant form's GEMMs run at least this many rows: MKL's float32 GEMM gave a row other bits with 1-3 rows than
#: with 4-64 (AMD Zen 4; 4-64 agreed with each other, whatever the number of keys).
INVARIANT_MIN_ROWS = 8
#: The invariant form pads the keys to a multiple of this, so that ``exp`` runs whole vectors (torch computes a
#: tensor's last ``numel % (2 x vector width)`` elements with the scalar ``exp``, whose last bit may differ).
INVARIANT_KEY_ALIGN = 64


def _causal(module: nn.Module, t: int, attention_mask: torch.Tensor | None, is_causal: bool | None) -> bool:
    """A causal forward of ``t > 1`` rows without a mask (a prefill), as transformers' sdpa function decides it."""
    return bool(t > 1 and attention_mask is None and (is_causal if is_causal is not None else module.is_causal))


def _refuse_unsupported(kwargs: dict) -> None:
    for unsupported in ("softcap", "position_bias", "s_aux", "sinks"):
        if kwargs.get(unsupported) is not None:
            raise ValueError(f"the {GQA_ATTENTION!r} attention does not support {unsupported}; use attn 'sdpa'")


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
    _refuse_unsupported(kwargs)
    t = query.shape[2]
    causal = _causal(module, t, attention_mask, is_causal)
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


def _gqa_attention_invariant(
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
    """:func:`_gqa_sdpa` with row-invariant numerics (the module docstring); same contract and shapes.

    Contract: a boolean mask marks the slots to attend; an additive one holds 0 or a large negative value, which
    gives weight exactly 0. A row that attends to no slot (padding in a batch) gets 0, as SDPA gives it.
    """
    b, h, t, d = query.shape
    if _causal(module, t, attention_mask, is_causal) or dropout:  # a prefill: shared by vanilla and speculative
        return _gqa_sdpa(module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs)
    _refuse_unsupported(kwargs)
    kv_heads, s = key.shape[1], key.shape[2]
    group = h // kv_heads
    real = group * t  # query rows per key/value head: head i reads key/value head i // group
    rows = max(real, INVARIANT_MIN_ROWS)  # fewer rows run other GEMM kernels than a tree's
    width = -(-s // INVARIANT_KEY_ALIGN) * INVARIANT_KEY_ALIGN  # exp sees whole vectors only (no scalar tail)
    scale = scaling if scaling is not None else d**-0.5
    q = F.pad(query.reshape(b, kv_heads, real, d).float() * scale, (0, 0, 0, rows - real))
    scores = F.pad(q @ key.float().transpose(-1, -2), (0, width - s), value=float("-inf"))
    if attention_mask is not None:
        mine = scores[:, :, :real, :s].unflatten(2, (group, t))  # [B, kv, group, T, S], a view
        mask = attention_mask[:, :, None]  # [B, 1, 1, T, S]
        if mask.dtype == torch.bool:
            mine.masked_fill_(~mask, float("-inf"))
        else:
            mine.add_(mask)
    top = scores.amax(-1, keepdim=True)
    top.masked_fill_(top == float("-inf"), 0.0)  # a row that sees no key (a padded batch row): weights 0, not NaN
    p = scores.sub_(top).exp_()  # unnormalised weights; masked slots exactly 0
    # one float64 GEMM gives both sum_j p_j v_j and sum_j p_j (a column of ones)
    dv = value.shape[-1]
    values = F.pad(value.double(), (0, 1, 0, width - s), value=1.0)  # padded keys have weight 0
    total = (p.double() @ values)[:, :, :real]
    # a row that sees a key has a denominator >= 1 (its top key's weight is exactly 1); a row that sees none, 0 / 1
    out = (total[..., :dv] / total[..., dv:].clamp(min=1.0)).reshape(b, h, t, dv)
    return out.to(query.dtype).transpose(1, 2).contiguous(), None


def _register_gqa_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    for name, function in ((GQA_ATTENTION, _gqa_sdpa), (GQA_INVARIANT, _gqa_attention_invariant)):
        if name not in AttentionInterface._global_mapping:
            AttentionInterface.register(name, function)
            AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])


def set_attention(model: nn.Module, name: str) -> bool:
    config = getattr(model, "config", None)
    if config is None or not hasattr(model, "set_attn_implementation"):
        return False
    model.set_attn_implementation(name)
    return config._attn_implementation == name


def use_gqa_attention(model: nn.Module, invariant: bool = False) -> str:
    """Switch an ``sdpa`` model to the copy-free GQA attention (its row-invariant form with ``invariant``); returns
    the attention implementation now in force."""
    attention = getattr(getattr(model, "config", None), "_attn_implementation", "") or ""
    if attention in ("sdpa", *GQA_NAMES):
        _register_gqa_attention()
        name = GQA_INVARIANT if invariant else GQA_ATTENTION
        attention = name if set_attention(model, name) else attention
    return attention
