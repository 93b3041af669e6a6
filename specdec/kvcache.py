"""A preallocated KV cache indexed by position, plugged into Hugging Face models through their Cache API.

Each layer owns ``keys``/``values`` buffers ``[B, H_kv, max_len, D]`` allocated once. A forward writes its
new entries at ``write_pos .. write_pos + n`` and attends over ``[0, write_pos + n)``; the caller passes
an explicit 4-D mask of that width. Rejected tree entries are simply overwritten by the next forward,
so rollback costs nothing; :meth:`PositionCache.compact` moves an accepted path's entries into place.

No modeling code is forked: HF decoder layers call ``Cache.update`` and accept a ready 4-D mask.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

__all__ = ["PositionCache", "PositionLayer", "CacheFullError"]


class CacheFullError(ValueError):
    """More tokens than the preallocated cache holds."""


class PositionLayer(CacheLayerMixin):
    """One layer's preallocated keys/values; writes at ``write_pos`` (a Python int set by the owner)."""

    is_compileable = False
    is_sliding = False

    def __init__(self, max_len: int) -> None:
        super().__init__()
        self.max_len = max_len
        self.write_pos = 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        b, h, _, d = key_states.shape
        self.keys = key_states.new_zeros(b, h, self.max_len, d)
        self.values = value_states.new_zeros(b, h, self.max_len, value_states.shape[-1])
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start, end = self.write_pos, self.write_pos + key_states.shape[-2]
        if end > self.max_len:
            raise CacheFullError(f"cache of {self.max_len} positions cannot hold position {end - 1}")
        self.keys[:, :, start:end] = key_states
        self.values[:, :, start:end] = value_states
        return self.keys[:, :, :end], self.values[:, :, :end]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.write_pos + query_length, 0

    def get_seq_length(self) -> int:
        return self.write_pos

    def get_max_length(self) -> int:
        return self.max_len


class PositionCache(Cache):
    """A :class:`~transformers.cache_utils.Cache` of :class:`PositionLayer` s.

    Args:
        num_layers: decoder layers of the model.
        max_len: capacity in positions.
    """

    def __init__(self, num_layers: int, max_len: int) -> None:
        super().__init__(layers=[PositionLayer(max_len) for _ in range(num_layers)])
        self.max_len = max_len

    def set_write_pos(self, pos: int) -> None:
        """Next forward writes at ``pos`` and attends over ``[0, pos + n)``."""
        for layer in self.layers:
            layer.write_pos = pos

    @torch.no_grad()
    def compact(self, start: int, src: torch.Tensor) -> None:
        """Copy entries ``start + src[i]`` to ``start + i`` in every layer.

        Args:
            start: first position of the block (the root of the verified tree).
            src: ``[k]`` long offsets into the block (accepted node ids, root first; ``src[0] == 0``).
        """
        k = src.shape[0]
        index = src + start
        for layer in self.layers:
            if layer.is_initialized:
                layer.keys[:, :, start : start + k] = layer.keys.index_select(2, index)
                layer.values[:, :, start : start + k] = layer.values.index_select(2, index)
