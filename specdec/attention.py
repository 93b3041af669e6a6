"""What a decoder's attention layers see, so that a tree forward attends exactly as ``generate`` would.

A speculative forward passes the model an explicit mask: node ``i`` sees the committed prefix and its own
ancestors. That is all a full-attention layer needs. A sliding-window layer of window ``W`` must in addition see
no key more than ``W - 1`` positions behind its query (transformers' ``sliding_window_overlay``: a query at
position ``p`` attends to keys at positions ``> p - W``). Positions here are the tokens' positions in the
sequence (``length + depth`` for a tree node), not their cache slots, which differ inside a tree.

:class:`AttentionLayout` reads the layer types from the config (``layer_types``, or ``sliding_window`` on every
layer for Mistral-style configs) and builds the mask argument the model expects: one 4-D mask when all layers are
alike, or ``{"full_attention": ..., "sliding_attention": ...}`` for hybrid models, which transformers' decoders take
as their per-type mask mapping. Anything else is refused at construction (:class:`UnsupportedModelError`): layer
types with other patterns (chunked, linear or recurrent attention), attention implementations that cannot take a
4-D mask (flash attention, flex attention), encoder-decoder models.
"""

from __future__ import annotations

import inspect
import warnings
from dataclasses import dataclass

import torch
from transformers.masking_utils import sliding_window_overlay

from specdec.errors import SpecdecError

__all__ = [
    "FULL",
    "SLIDING",
    "TESTED_FAMILIES",
    "AttentionLayout",
    "UnsupportedModelError",
    "UntestedModelWarning",
    "additive_mask",
]

FULL, SLIDING = "full_attention", "sliding_attention"
#: implementations that take an explicit 4-D additive mask
MASKABLE = ("eager", "sdpa", "specdec_sdpa", "specdec_sdpa_invariant", "specdec_sdpa_skinny")
TESTED_FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma3_text", "phi3")  # tests/test_families.py


class UnsupportedModelError(SpecdecError, ValueError):
    """A model the adapter cannot serve exactly; the message says what to do instead."""


class UntestedModelWarning(UserWarning):
    """A model family outside :data:`TESTED_FAMILIES`: its layout looks servable, but no test proves it."""


def _cache_kwarg(model: torch.nn.Module) -> str:
    """The keyword ``model.forward`` takes its KV cache by (the signature behind transformers' deprecation shims)."""
    params = inspect.signature(model.forward).parameters  # follows __wrapped__ through deprecate_kwarg
    for name in ("cache", "past_key_values"):
        if name in params:
            return name
    raise UnsupportedModelError(
        f"{type(model).__name__}.forward takes no KV cache argument ('cache' or 'past_key_values'); "
        "specdec needs one to run tree forwards over a committed prefix"
    )


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``[n, kv]`` bool (True = attend) -> ``[1, 1, n, kv]`` additive mask for an HF model (0 or dtype min).

    Additive rather than bool because HF eager attention adds the mask to the scores; sdpa accepts either.
    """
    zeros = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return zeros.masked_fill_(~allowed, torch.finfo(dtype).min)[None, None]


@dataclass(frozen=True)
class AttentionLayout:
    """The attention pattern of each decoder layer.

    Attributes:
        layer_types: ``FULL`` or ``SLIDING`` per layer.
        sliding_window: ``W`` of the sliding layers (None if there are none).
        dtype: the dtype of the attention scores, which an additive mask must have.
        cache_kwarg: the keyword the model's ``forward`` takes its KV cache by: ``"cache"`` in newer transformers
            releases, ``"past_key_values"`` before (a removed name would land in ``**kwargs`` and be ignored, so the
            forward would silently run without the cache: the name is read from the signature, never assumed).
    """

    layer_types: tuple[str, ...]
    sliding_window: int | None
    dtype: torch.dtype
    cache_kwarg: str

    @classmethod
    def of(cls, model: torch.nn.Module, warn: bool = True) -> AttentionLayout:
        """Read and check ``model``'s layout (after any backend switch of its attention implementation).

        Raises:
            UnsupportedModelError: encoder-decoder, an attention implementation without 4-D masks, a layer type
                other than full or sliding-window attention, or a ``forward`` that takes no KV cache argument.
        """
        config = model.config.get_text_config()
        name = type(model).__name__
        if getattr(model.config, "is_encoder_decoder", False):
            raise UnsupportedModelError(f"{name} is an encoder-decoder model; only decoder-only causal LMs are served")
        cache_kwarg = _cache_kwarg(model)
        impl = getattr(model.config, "_attn_implementation", None) or "eager"
        if impl not in MASKABLE:
            raise UnsupportedModelError(
                f"{name} runs attention with {impl!r}, which cannot take the tree mask a speculative forward needs; "
                'load it with attn_implementation="sdpa" (or "eager"), or call model.set_attn_implementation("sdpa")'
            )
        n = int(config.num_hidden_layers)
        window = getattr(config, "sliding_window", None)
        types = getattr(config, "layer_types", None)
        if types is None:
            types = [SLIDING if window is not None else FULL] * n
        types = tuple(types[:n])
        other = sorted(set(types) - {FULL, SLIDING})
        if other:
            raise UnsupportedModelError(
                f"{name} has layers of type {other}; specdec serves full and sliding-window attention only"
            )
        if SLIDING in types and (window is None or int(window) < 1):
            raise UnsupportedModelError(f"{name} has sliding-window layers but no valid sliding_window ({window})")
        model_type = getattr(config, "model_type", None)
        if warn and model_type not in TESTED_FAMILIES:
            warnings.warn(
                f"{name} (model_type {model_type!r}) is not among the tested families {TESTED_FAMILIES}; its layout "
                f"({sorted(set(types))}) is one specdec serves, but check greedy output against generate()",
                UntestedModelWarning,
                stacklevel=3,
            )
        dtype = getattr(model, "dtype", None)
        if dtype is None or not dtype.is_floating_point:
            dtype = model.get_input_embeddings().weight.dtype
        if not dtype.is_floating_point:
            dtype = torch.float32
        return cls(types, int(window) if SLIDING in types else None, dtype, cache_kwarg)

    @property
    def hybrid(self) -> bool:
        return len(set(self.layer_types)) > 1

    def mask(
        self, allowed: torch.Tensor, key_positions: torch.Tensor, query_positions: torch.Tensor
    ) -> torch.Tensor | dict[str, torch.Tensor]:
        """The ``attention_mask`` argument for a forward.

        Args:
            allowed: ``[n, kv]`` bool, True where query ``i`` may see key ``j`` under full attention (prefix and
                ancestors-or-self).
            key_positions: ``[kv]`` sequence positions of the cache slots.
            query_positions: ``[n]`` sequence positions of the queries.

        Returns:
            ``[1, 1, n, kv]`` additive mask, or a mapping from layer type to one for hybrid models.
        """
        masks: dict[str, torch.Tensor] = {}
        if FULL in self.layer_types:
            masks[FULL] = additive_mask(allowed, self.dtype)
        if SLIDING in self.layer_types:
            in_window = sliding_window_overlay(self.sliding_window)(0, 0, query_positions[:, None], key_positions[None])
            masks[SLIDING] = additive_mask(allowed & in_window, self.dtype)
        return masks if self.hybrid else next(iter(masks.values()))
