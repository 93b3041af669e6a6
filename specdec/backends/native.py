"""Native CPU forms of small per-cycle steps (the kernel library of :mod:`specdec.backends.skinny`): where they run.

At T > 0 a CPU cycle spends milliseconds in dozens of small tensor ops between the target's and the head's forwards:
the verification plan of a sampled tree (:mod:`specdec.verify.native`, ``multiround.cpp``), the inverse-CDF draws
of :func:`specdec.sampling.sample` and :func:`specdec.sampling.sample_distinct` (``draws.cpp``) and top-p's cut in
:func:`specdec.sampling.warp` (``nucleus.cpp``). Each native form is
a backend of its function: the same law, read from the same random numbers, held to the tensor form by
``tests/test_native_steps.py``.

They run on CPU tensors of float32 or float64 where the kernel library is available (a compiler, AVX2 and FMA) and
``SPECDEC_SKINNY`` is not ``off`` (the test suite's default, which keeps the tensor forms).
"""

from __future__ import annotations

import torch

from specdec.backends import skinny
from specdec.backends.skinny_choice import skinny_off

__all__ = ["draws", "nucleus", "runs_native", "why_not_native"]


def why_not_native() -> str | None:
    """Why the native forms do not run on this machine's CPU tensors (``specdec doctor`` prints it), or None when
    they do. The first call may build the kernel library (about a minute, once per machine and torch)."""
    return "SPECDEC_SKINNY=off" if skinny_off() else skinny.unavailable()


def runs_native(t: torch.Tensor) -> bool:
    """Whether the native forms serve ``t``: a CPU tensor of float32 or float64, and :func:`why_not_native` None."""
    return t.device.type == "cpu" and t.dtype in (torch.float32, torch.float64) and why_not_native() is None


def nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """``probs [..., V]`` (a softmax; overwritten and returned) with top-p applied: the tokens whose mass before them
    in descending order is at least ``top_p`` set to 0 and the rest renormalised, found from the mass above a few
    thresholds and a sort of the tokens above the cut only (``nucleus.cpp`` states how, and where the cut can differ
    from the tensor form's)."""
    return torch.ops.specdec.nucleus_(probs.contiguous(), float(top_p))


def draws(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """``probs [M, V]``, uniforms ``u [M, k]`` (float64, in ``[0, 1)``) -> ``[M, k]`` long: ``k`` draws per row
    without replacement by inverse CDF (``draws.cpp`` states the law; :func:`specdec.sampling.sample_distinct`'s)."""
    return torch.ops.specdec.sample_rows(probs, u)
