"""Grouped-query attention without key/value copies, as a transformers attention function.

transformers' ``sdpa`` path repeats every layer's keys/values to all query heads before the kernel; SDPA's
``enable_gqa`` reads them as they are. Registered with transformers' ``AttentionInterface`` as ``"specdec_sdpa"``
(an addition to its registry; nothing else changes) and switched on per model by :func:`use_gqa_attention`.

The few-row form (``"specdec_sdpa_skinny"``, :func:`_gqa_skinny`): a step's or a tree's float32 rows on
``specdec::skinny_attention`` (``skinny_attention.cpp``), whose result for a row depends only on the keys it sees, so
it is row-invariant in float32 without float64; row-invariant numerics take it where it serves the model, and
``weights="auto"`` where it measured faster than SDPA on the CPU at hand (:mod:`specdec.backends.attention_choice`).

Row-invariant numerics (``"specdec_sdpa_invariant"``): the attention of a tree forward and of a 1-token step must
give a row the same bits, but SDPA's CPU kernels group their sums by the number of rows and keys and by where masked
slots fall among the keys, and these differ between a 1-token step (keys ``[0, L]``) and a tree forward (keys
``[0, L + n)``, siblings masked). In bfloat16 that last-bit difference becomes a whole bfloat16 ulp in some outputs
of every layer. The invariant form (:func:`_gqa_attention_invariant`) runs the same SDPA in float64 and rounds its
output to the model's dtype. The two forwards still group their sums differently, but in float64 that moves a result
by ~1e-16 relative, and rounding it to bfloat16 (or float32) gives the same value unless it lies that close to a
rounding boundary: probability ~1e-13 per element in bfloat16, ~1e-9 in float32.

Its keys and values come from a float64 cache (:class:`~specdec.kvcache.PositionCache` ``dtype``, which
:class:`~specdec.target.HFTarget` sets for invariant numerics; bfloat16 and float32 values are exact in float64), so
no forward converts the cache; with a cache in the model's dtype every call converts it (same values, slower).
``tests/test_invariant.py`` checks the property bit for bit on SmolLM2 on whatever CPU runs the suite (contexts across
SDPA's key blocks, a branching tree, greedy EAGLE-3 against vanilla token for token). A causal prefill (no mask) runs
the ordinary kernel in the model's dtype: vanilla and speculative decoding share it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "GQA_ATTENTION",
    "GQA_INVARIANT",
    "GQA_NAMES",
    "GQA_SKINNY",
    "attention_label",
    "cache_dtype",
    "set_attention",
    "use_gqa_attention",
]

GQA_ATTENTION = "specdec_sdpa"
GQA_INVARIANT = "specdec_sdpa_invariant"
#: :func:`_gqa_sdpa` with a decoding step's or a tree's few query rows on ``specdec::skinny_attention``.
GQA_SKINNY = "specdec_sdpa_skinny"
#: Every form of the copy-free GQA attention.
GQA_NAMES = (GQA_ATTENTION, GQA_INVARIANT, GQA_SKINNY)
#: What :meth:`~specdec.backends.choice.Execution.describe` adds for a forward on the skinny GEMM and attention.
SKINNY_NUMERICS = ", row-invariant float32 (linears and attention on the skinny kernels)"
#: The most query rows the skinny attention takes (the largest tree, as for the skinny GEMM); more is a prefill.
SKINNY_ROWS = 64


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
    if key.dtype != query.dtype:  # a float64 cache (invariant numerics) holds the model's values exactly
        key, value = key.to(query.dtype), value.to(query.dtype)
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

    ``key``/``value`` ``[B, h_kv, S, d]`` in float64 (the invariant cache) or in the query's dtype; the output is in
    the query's dtype. A row that sees no key gets 0 with a boolean or ``-inf`` mask, and SDPA's uniform average
    with a finite additive one, as :func:`_gqa_sdpa` gives it.
    """
    t = query.shape[2]
    if _causal(module, t, attention_mask, is_causal) or dropout:  # a prefill: shared by vanilla and speculative
        return _gqa_sdpa(module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs)
    _refuse_unsupported(kwargs)
    if attention_mask is not None and attention_mask.dtype != torch.bool:
        attention_mask = attention_mask.double()
    out = F.scaled_dot_product_attention(
        query.double(),
        key.double(),
        value.double(),
        attn_mask=attention_mask,
        scale=scaling,
        enable_gqa=query.shape[1] != key.shape[1],
    )
    return out.to(query.dtype).transpose(1, 2).contiguous(), None


def _gqa_skinny(
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
    """:func:`_gqa_sdpa` with the few query rows of a step or a tree on ``specdec::skinny_attention`` (same contract
    and shapes; ``skinny_attention.cpp`` states the kernel's: float32, a mask shared by the heads, and each row's
    output bitwise the same whichever rows share the call). A prefill, dropout, another dtype or a per-head mask runs
    :func:`_gqa_sdpa`."""
    t = query.shape[2]
    fits = attention_mask is None or (attention_mask.dim() == 4 and attention_mask.shape[1] == 1)
    fits = fits and t <= SKINNY_ROWS and not dropout and not _causal(module, t, attention_mask, is_causal)
    if not fits or query.dtype != torch.float32 or key.dtype != torch.float32 or query.device.type != "cpu":
        return _gqa_sdpa(module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs)
    _refuse_unsupported(kwargs)
    if attention_mask is not None and attention_mask.dtype not in (torch.bool, torch.float32):
        attention_mask = attention_mask.float()
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    return torch.ops.specdec.skinny_attention(query, key, value, attention_mask, scale), None


def _register_gqa_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    for name, function in (
        (GQA_ATTENTION, _gqa_sdpa),
        (GQA_INVARIANT, _gqa_attention_invariant),
        (GQA_SKINNY, _gqa_skinny),
    ):
        if name not in AttentionInterface._global_mapping:
            AttentionInterface.register(name, function)
            AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])


def set_attention(model: nn.Module, name: str) -> bool:
    config = getattr(model, "config", None)
    if config is None or not hasattr(model, "set_attn_implementation"):
        return False
    model.set_attn_implementation(name)
    return config._attn_implementation == name


def attention_label(model: nn.Module) -> str:
    """What a cost curve's name adds for ``model``'s attention: ``"+invariant"`` (row-invariant numerics, dearer per
    row), ``"+attention"`` (the few-row kernel), else ``""``."""
    attention = getattr(getattr(model, "config", None), "_attn_implementation", None)
    return {GQA_INVARIANT: "+invariant", GQA_SKINNY: "+attention"}.get(attention, "")


def cache_dtype(attention: str | None) -> torch.dtype | None:
    """The dtype a KV cache should hold for a model whose attention implementation is ``attention``: float64 for the
    invariant form (which reads float64 keys/values without converting them), None (the model's own) otherwise."""
    return torch.float64 if attention == GQA_INVARIANT else None


def use_gqa_attention(model: nn.Module, invariant: bool = False, skinny: bool | None = None) -> str:
    """Switch an ``sdpa`` model to the copy-free GQA attention (with ``invariant`` a row-invariant form: the few-row
    kernel where :func:`~specdec.backends.attention_choice.few_row_serves`, else float64 SDPA; with
    ``skinny``, its few-row form where :func:`~specdec.backends.attention_choice.skinny_attention_fits` says so;
    ``None`` keeps the few-row form where the model has it); returns the attention implementation now in force."""
    attention = getattr(getattr(model, "config", None), "_attn_implementation", "") or ""
    if attention in ("sdpa", *GQA_NAMES):
        _register_gqa_attention()
        from specdec.backends.attention_choice import few_row_serves, skinny_attention_fits

        if invariant:  # the few-row kernel where it serves the model (row-invariant in float32), else float64 SDPA
            few = few_row_serves(model)
        else:
            few = skinny_attention_fits(model)[0] if skinny else skinny is None and attention == GQA_SKINNY
        name = GQA_SKINNY if few else GQA_INVARIANT if invariant else GQA_ATTENTION
        attention = name if set_attention(model, name) else attention
    return attention
