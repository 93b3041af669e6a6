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
* commit compacts a fixed ``max_depth + 1`` entries where a draft token was accepted
  (:meth:`~specdec.kvcache.PositionCache.compact`; the root alone is in place already).

So the model's forward compiles once per bucket and never again (``tests/test_compiled.py`` counts). The prefill,
whose length varies, runs eagerly on the same static cache, as transformers recommends for its own static cache.

Where it runs: on CUDA, ``mode="reduce-overhead"`` (CUDA graphs). Elsewhere inductor *freezes* the weights
(:func:`freezes`, :func:`cpu_options`): they become graph constants, packed at compile time, and each GEMM's kernel is
chosen by timing on the CPU at hand (inductor's C++ GEMM template or ATen's packed linear). Two things make that
real and safe on torch 2.13 (``docs/results/2026-11-28-frozen-zen3``):

* freezing must be on while dynamo *traces* (``torch._inductor.config.freezing`` inside each call, not only in the
  compile options), or the weights reach inductor as graph inputs and nothing is frozen; traced so, every weight is
  guarded on its identity, so two models of one class each get their own graphs;
* the static cache's tensors are unmarked as static addresses after they are allocated
  (:meth:`~specdec.kvcache.PositionCache.release_static_addresses`): a marked tensor would become an unguarded
  graph attribute, and a graph compiled for one cache ran on another (an index out of bounds in
  ``tests/test_compiled.py``).

Frozen graphs are not in inductor's on-disk graph cache (their packed constants cannot be pickled), so every process
compiles again; the GEMM timings are cached. Each graph holds its own packed copy of the weights.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = [
    "BUCKETS",
    "PackageError",
    "bucket",
    "compile_forward",
    "compiled_graphs",
    "cpu_options",
    "freezes",
    "run_compiled",
]

#: Forward sizes compiled by default: the 1-token step and tree sizes up to the adaptive budget's largest (64,
#: ``MethodOptions.max_total_tokens``).
BUCKETS: tuple[int, ...] = (1, 4, 8, 16, 32, 64)
#: The environment switch of inductor's GEMM autotuning where graphs freeze (:func:`cpu_options`).
TUNE_ENV = "SPECDEC_TUNE_GEMMS"
#: Graphs dynamo may keep per forward function (see :func:`compile_forward`).
RECOMPILE_LIMIT = 64


class PackageError(RuntimeError):
    """An ahead-of-time package could not be built, loaded or run for this model (:mod:`specdec.backends.aot`; the
    runner falls back to the eager static forward, :func:`run_compiled`)."""


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

    CUDA: CUDA graphs (``mode="reduce-overhead"``). Otherwise: inductor with :func:`cpu_options`, weights frozen
    (inference only: they are folded in as constants, so they must not change afterwards; the module docstring).

    Dynamo keeps at most ``recompile_limit`` graphs per forward function, shared by every model of one class in the
    process (default 8). Each call runs with the limit raised to at least :data:`RECOMPILE_LIMIT`, so several buckets
    of several models fit, inside ``torch._dynamo.config.patch``: no process-wide setting is left changed.
    """
    device = next(model.parameters()).device
    frozen = freezes(device)
    if frozen:
        compiled = torch.compile(model, fullgraph=True, dynamic=False, options=cpu_options())
    else:
        compiled = torch.compile(model, fullgraph=True, dynamic=False, mode="reduce-overhead")

    def run(*args: Any, **kwargs: Any) -> object:
        limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
        # freezing on while dynamo traces: weights become graph constants guarded on their identity (per model)
        with torch._dynamo.config.patch(recompile_limit=limit), torch._inductor.config.patch(freezing=frozen):
            return compiled(*args, **kwargs)

    return run


def cpu_options() -> dict[str, Any]:
    """Inductor's options where graphs freeze: the weights folded in as constants (``freezing``), and each GEMM's
    kernel chosen by timing on the CPU at hand, inductor's C++ GEMM template against ATen's packed linear
    (``max_autotune``; minutes of compiling per graph for a 30-layer model on 2 cores).

    ``SPECDEC_TUNE_GEMMS=0`` leaves the autotuning out (freezing alone: inductor's packed linear, MKL on x86), as the
    fast test suite runs; ``1`` (the default) tunes. Any other value is refused.
    """
    tune = os.environ.get(TUNE_ENV, "1")
    if tune not in ("0", "1"):
        raise ValueError(f"{TUNE_ENV} must be 0 or 1, got {tune!r}")
    options: dict[str, Any] = {"freezing": True}
    if tune == "1":
        options.update(max_autotune=True, max_autotune_gemm_backends="CPP,ATEN")
    return options


def freezes(device: torch.device) -> bool:
    """Whether compiled forwards on ``device`` fold the weights in as constants (inductor's ``freezing``): every
    device but CUDA, whose graphs replay with the weights in place."""
    return device.type != "cuda"


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
    except (torch._dynamo.exc.TorchDynamoException, torch._dynamo.exc.FailOnRecompileLimitHit, PackageError) as e:
        what = "an ahead-of-time package" if isinstance(e, PackageError) else "torch.compile"
        warnings.warn(
            f"{what} cannot serve this model ({type(e).__name__}: {str(e).strip().splitlines()[0]}); "
            "running the static-shape path eagerly",
            FastPathWarning,
            stacklevel=4,  # the caller of the forward that tried to compile
        )
        retry()
        return eager(**inputs), True
