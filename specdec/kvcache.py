"""A preallocated KV cache indexed by position, plugged into Hugging Face models through their Cache API.

Each layer owns ``keys``/``values`` buffers ``[B, H_kv, max_len, D]`` allocated once, in the model's dtype or in the
cache's own (``dtype``: float64 for the row-invariant attention of :mod:`specdec.backends.gqa`, which then reads them
without a conversion). A forward writes its new entries at ``write_pos .. write_pos + n`` and attends over
``[0, write_pos + n)``; the caller passes an explicit 4-D mask of that width. Contract: a forward reads only slots
written before it or by itself, so the buffers are allocated uninitialised (pages become resident as positions are
written, not for the whole capacity at once). Rejected tree entries are simply overwritten by the next forward,
so rollback costs nothing; :meth:`PositionCache.compact` moves an accepted path's entries into place.

No modeling code is forked: HF decoder layers call ``Cache.update`` and accept a ready 4-D mask.

Static mode (``static=True``, the static-shape path of :mod:`specdec.backends`): the layers are transformers' own
:class:`~transformers.cache_utils.StaticLayer` s. A forward writes with ``index_copy_`` at positions held in a device
tensor (``cumulative_length``, set in place by :meth:`PositionCache.set_write_pos`) and attends over the whole
capacity, so every forward of ``n`` tokens has the same shapes whatever the prefix length: what
``torch.compile(fullgraph=True)`` and CUDA-graph capture need. The caller's mask then spans the whole capacity.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, CacheLayerMixin, StaticLayer

from specdec.errors import SpecdecError

__all__ = ["PositionCache", "PositionLayer", "CacheFullError"]


class CacheFullError(SpecdecError, ValueError):
    """More tokens than the preallocated cache holds."""

    command_lines = dict.fromkeys(("generate", "bench"), "{problem}; raise --max-len or lower --max-new-tokens")


class TreeTooLargeError(CacheFullError):
    """A policy's largest tree does not fit the target's cache at all (a larger cache is the only fix)."""

    command_lines = dict.fromkeys(
        ("generate", "bench"), "{problem}; raise --max-len (fewer new tokens cannot make a tree fit)"
    )


class PositionLayer(CacheLayerMixin):
    """One layer's preallocated keys/values; writes at ``write_pos`` (a Python int set by the owner).

    Args:
        max_len: capacity in positions.
        dtype: the buffers' dtype (None: the first keys' and values' own); the written states are cast to it.
    """

    is_compileable = False
    is_sliding = False

    def __init__(self, max_len: int, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.max_len = max_len
        self.dtype = dtype
        self.write_pos = 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        b, h, _, d = key_states.shape
        # uninitialised: a forward reads only slots written before it or by itself (the module docstring)
        self.keys = key_states.new_empty(b, h, self.max_len, d, dtype=self.dtype or key_states.dtype)
        self.values = value_states.new_empty(
            b, h, self.max_len, value_states.shape[-1], dtype=self.dtype or value_states.dtype
        )
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start, n = self.write_pos, key_states.shape[-2]
        if start + n > self.max_len:
            raise CacheFullError(f"cache of {self.max_len} positions cannot hold position {start + n - 1}")
        # narrow: one view op each, where `keys[:, :, start:end]` dispatches a slice per dimension (every layer, every
        # forward)
        self.keys.narrow(2, start, n).copy_(key_states)
        self.values.narrow(2, start, n).copy_(value_states)
        return self.keys.narrow(2, 0, start + n), self.values.narrow(2, 0, start + n)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.write_pos + query_length, 0

    def get_seq_length(self) -> int:
        return self.write_pos

    def get_max_length(self) -> int:
        return self.max_len


class PositionCache(Cache):
    """A :class:`~transformers.cache_utils.Cache` of :class:`PositionLayer` s, or of transformers'
    :class:`~transformers.cache_utils.StaticLayer` s when ``static``.

    Args:
        num_layers: decoder layers of the model.
        max_len: capacity in positions.
        static: fixed-shape layers (write at a device-side position, attend over the whole capacity).
        dtype: the keys'/values' dtype (None: the model's); eager layers only.
    """

    def __init__(self, num_layers: int, max_len: int, static: bool = False, dtype: torch.dtype | None = None) -> None:
        if static and dtype is not None:
            raise ValueError("a static cache holds the model's dtype (transformers' StaticLayer); dtype is for eager")
        layers = [StaticLayer(max_len) if static else PositionLayer(max_len, dtype) for _ in range(num_layers)]
        super().__init__(layers=layers)
        self.max_len = max_len
        self.static = static

    @torch.no_grad()
    def resize(self, max_len: int, keep: int) -> None:
        """Static layers: a capacity of ``max_len`` positions, slots ``[0, keep)`` kept (the rest start as zeros).

        For a forward that takes any capacity (the ahead-of-time package, :mod:`specdec.backends.aot`): it reads every
        slot, so a cache sized to what the generation holds costs less per step than one sized to the most it may
        hold. The layers are replaced in this object, so every holder of the cache sees the new ones.
        """
        if not self.static:
            raise ValueError("only a static cache is resized (its forward reads the whole capacity)")
        if keep > min(max_len, self.max_len):
            raise ValueError(f"cannot keep {keep} slots in a cache of {max_len} (was {self.max_len})")
        old, self.layers = self.layers, [StaticLayer(max_len) for _ in self.layers]
        for layer, new in zip(old, self.layers, strict=True):
            if layer.is_initialized:  # allocated like the old one; its prefix copied
                new.lazy_initialization(layer.keys.narrow(2, 0, 1), layer.values.narrow(2, 0, 1))
                new.keys.narrow(2, 0, keep).copy_(layer.keys.narrow(2, 0, keep))
                new.values.narrow(2, 0, keep).copy_(layer.values.narrow(2, 0, keep))
        self.max_len = max_len

    def set_write_pos(self, pos: int) -> None:
        """Next forward writes at ``pos`` and attends over ``[0, pos + n)`` (static: over the whole capacity)."""
        for layer in self.layers:
            if self.static:
                layer.cumulative_length.fill_(pos)  # in place: compiled graphs hold this tensor's address
            else:
                layer.write_pos = pos

    def release_static_addresses(self) -> None:
        """Unmark the allocated static tensors (keys, values, write position) as static addresses, for compiled
        graphs that freeze (:func:`specdec.backends.compiled.freezes`, every device but CUDA).

        transformers marks them for CUDA graphs; under inductor's ``freezing`` a marked tensor becomes a graph
        attribute with no guard on its identity, so a graph compiled for this cache would run on another cache of the
        same shapes (measured: another model's cache, an index out of bounds). Unmarked they are plain inputs, as on
        every CPU graph before freezing.
        """
        if not self.static:
            return
        for layer in self.layers:
            if layer.is_initialized:
                for t in (layer.keys, layer.values, layer.cumulative_length):
                    if hasattr(t, "_dynamo_static_input_type"):
                        del t._dynamo_static_input_type  # torch has no public unmark

    @torch.no_grad()
    def compact(self, start: int, src: torch.Tensor) -> None:
        """Copy entries ``start + src[i]`` to ``start + i`` in every layer.

        Args:
            start: first position of the block (the root of the verified tree).
            src: ``[k]`` long offsets into the block (accepted node ids, root first; ``src[0] == 0``). Entries after
                the accepted count may be copied too (a fixed ``k`` keeps the shapes static): they land after the
                committed prefix, where the next forward overwrites them.
        """
        k = min(src.shape[0], self.max_len - start)  # a fixed-size path may reach past the capacity: leftovers only
        src = src[:k]
        index = src + start
        dest = torch.arange(start, start + k, device=src.device)
        for layer in self.layers:
            if layer.is_initialized:
                layer.keys.index_copy_(2, dest, layer.keys.index_select(2, index))
                layer.values.index_copy_(2, dest, layer.values.index_select(2, index))
