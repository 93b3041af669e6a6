"""The static-shape compiled forward: what ``static_shapes=True`` (:mod:`specdec.backends`) runs.

A CUDA graph replays fixed shapes at fixed addresses; ``torch.compile(fullgraph=True)`` on a CPU refuses the same
things capture does (a cache slice whose length changes, a Python-int position, a host-side count), so it is the
proof we can run without a GPU. The target adapter (:class:`specdec.target.HFTarget`) makes every forward
fixed-shape on this backend:

* its :class:`~specdec.kvcache.PositionCache` holds transformers' ``StaticLayer`` s (device-side write position,
  attention over the whole capacity);
* the mask spans the whole capacity;
* a tree of ``n`` nodes is padded to the bucket :func:`bucket` picks, with dummy nodes that see the prefix and
  themselves and that no real node sees (their logits and cache entries are never read);
* commit compacts a fixed ``max_depth + 1`` entries (:meth:`~specdec.kvcache.PositionCache.compact`).

So the model's forward compiles once per bucket and never again (``tests/test_compiled.py`` counts). The prefill,
whose length varies, runs eagerly on the same static cache, as transformers recommends for its own static cache.

Where it runs: on CUDA, ``mode="reduce-overhead"`` (CUDA graphs); elsewhere inductor with ``freezing`` requested.
On torch 2.13 that freezes nothing: dynamo hands inductor the weights as graph inputs, so every linear runs as an
unpacked ``aten::mm`` (MKL). ``torch._dynamo.config.prepare_freezing`` would fold them, but then a second model of
the same class in the process ran the first one's frozen constants (an index out of bounds in
``tests/test_compiled.py``), so it stays off (``docs/results/2026-11-28-curve-watch-zen3``). Compiled artefacts go to
inductor's on-disk cache (``TORCHINDUCTOR_CACHE_DIR``), so a second process with the same model and buckets
skips most of the compile time.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = ["BUCKETS", "bucket", "compile_forward", "compiled_graphs", "run_compiled"]

#: Forward sizes compiled by default: the 1-token step and tree sizes up to the adaptive budget's largest (64,
#: ``MethodOptions.max_total_tokens``).
BUCKETS: tuple[int, ...] = (1, 4, 8, 16, 32, 64)
#: Graphs dynamo may keep per forward function (see :func:`compile_forward`).
RECOMPILE_LIMIT = 64


def bucket(n: int, buckets: Sequence[int] = BUCKETS) -> int:
    """The padded size of an ``n``-token forward: the smallest bucket ``>= n``, else ``n`` rounded up to a multiple
    of the largest bucket (so the padding never exceeds the largest bucket minus one)."""
    if n < 1:
        raise ValueError(f"a forward needs at least one token, got {n}")
    for b in sorted(buckets):
        if b >= n:
            return b
    top = max(buckets)
    return -(-n // top) * top


def compile_forward(model: torch.nn.Module) -> Callable[..., object]:
    """``model``'s forward compiled with ``fullgraph=True`` and static shapes (one graph per input shape).

    CUDA: CUDA graphs (``mode="reduce-overhead"``). Otherwise: inductor with ``freezing`` (inference only: the
    weights are folded in as constants, so they must not change afterwards).

    Dynamo keeps at most ``recompile_limit`` graphs per forward function, shared by every model of one class in the
    process (default 8). Each call runs with the limit raised to at least :data:`RECOMPILE_LIMIT`, so several buckets
    of several models fit, inside ``torch._dynamo.config.patch``: no process-wide setting is left changed.
    """
    device = next(model.parameters()).device
    if device.type == "cuda":
        compiled = torch.compile(model, fullgraph=True, dynamic=False, mode="reduce-overhead")
    else:
        compiled = torch.compile(model, fullgraph=True, dynamic=False, options={"freezing": True})

    def run(*args: Any, **kwargs: Any) -> object:
        limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
        with torch._dynamo.config.patch(recompile_limit=limit):
            return compiled(*args, **kwargs)

    return run


def compiled_graphs() -> int:
    """Graphs dynamo has compiled in this process so far (a recompile adds one)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def run_compiled(
    compiled: Callable[..., Any], eager: Callable[..., Any], retry: Callable[[], None], inputs: dict[str, Any]
) -> tuple[Any, bool]:
    """``compiled(**inputs)``; where torch.compile cannot serve the model, one warning and ``eager(**inputs)``
    (``compiled is eager``: a plain call, errors raised as they come).

    The fast path's fallback contract (never a crash, never a silent wrong answer): the same static-shape forward
    runs eagerly. ``retry`` restores any state the failed attempt may have changed (e.g. the cache's write position)
    before the eager call. Returns the output and whether it fell back (the caller then stops compiling).
    """
    from specdec.backends.kernels import FastPathWarning

    if compiled is eager:
        return eager(**inputs), False
    try:
        return compiled(**inputs), False
    except (torch._dynamo.exc.TorchDynamoException, torch._dynamo.exc.FailOnRecompileLimitHit) as e:
        warnings.warn(
            f"torch.compile cannot serve this model ({type(e).__name__}: {str(e).strip().splitlines()[0]}); "
            "running the static-shape path eagerly",
            FastPathWarning,
            stacklevel=4,  # the caller of the forward that tried to compile
        )
        retry()
        return eager(**inputs), True
