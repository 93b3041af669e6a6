"""Count host syncs: every place Python reads a tensor's value (``item``, ``tolist``, ``int``, ``float``, ``bool``,
``__index__``), copies it to the host (``cpu``; ``numpy()`` of a device tensor needs it first) or asks for a
data-dependent shape (``nonzero``).

On a GPU each of these waits for the device (a host sync, and a break in any captured CUDA graph); on a CPU they are
cheap, but counting them on a CPU tells what the same code would do on a GPU. ``torch.cuda.set_sync_debug_mode``
only sees CUDA tensors, so this counter wraps the tensor methods themselves::

    with HostSyncCounter() as syncs:
        generator.generate(...)
    syncs.count  # value reads in the block

Not seen: syncs inside C++ ops (boolean-mask indexing, ``torch.nonzero`` called as a function, ``.to("cpu")``).
On CUDA, ``torch.cuda.set_sync_debug_mode("warn")`` sees those. On a CPU, ``cpu()`` of a CPU tensor costs
nothing but is counted, since on a GPU it would wait.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

__all__ = ["HostSyncCounter"]

_READS = ("item", "tolist", "__int__", "__float__", "__bool__", "__index__", "cpu", "nonzero")


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
