"""Count host syncs: every place Python reads a tensor's value (``item``, ``tolist``, ``int``, ``float``, ``bool``,
``__index__``).

On a GPU each of these waits for the device (a host sync, and a break in any captured CUDA graph); on a CPU they are
cheap, but counting them on a CPU tells what the same code would do on a GPU. ``torch.cuda.set_sync_debug_mode``
only sees CUDA tensors, so this counter wraps the tensor methods themselves::

    with HostSyncCounter() as syncs:
        generator.generate(...)
    syncs.count  # value reads in the block

Reads of 0-dim/1-element tensors made by torch internals in C++ are not seen (they do not go through these Python
methods); every read the library's Python code makes is.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

__all__ = ["HostSyncCounter"]

_READS = ("item", "tolist", "__int__", "__float__", "__bool__", "__index__")


class HostSyncCounter:
    """Context manager counting value reads of tensors (see the module docstring). Not thread-safe; not nestable."""

    def __init__(self) -> None:
        self.count = 0
        self._saved: dict[str, Any] = {}

    def __enter__(self) -> HostSyncCounter:
        for name in _READS:
            original = getattr(torch.Tensor, name)
            self._saved[name] = original

            @functools.wraps(original)
            def counted(tensor, *args, _original=original, **kwargs):
                self.count += 1
                return _original(tensor, *args, **kwargs)

            setattr(torch.Tensor, name, counted)
        return self

    def __exit__(self, *exc: object) -> None:
        for name, original in self._saved.items():
            setattr(torch.Tensor, name, original)
        self._saved.clear()
