"""Which kernel a model's ahead-of-time package runs each linear on, measured on the CPU at hand.

A package (:mod:`specdec.backends.aot`) compiles plain linears into inductor's own GEMMs, whose time grows with the
rows of a draft tree (T(8)/T(1) 1.44-1.62 for SmolLM2 on the Intel Xeon of family 6 model 106). The skinny kernel
(:mod:`specdec.backends.skinny`) holds 8 rows near one row's cost where it runs. Under ``weights="auto"``, a float32
CPU model served by its package puts each linear on the skinny kernel where its shape measured faster there than
stock, by ``T(1) + T(8)`` over cold weights (:mod:`specdec.backends.kernel_times` with the candidates
:data:`~specdec.backends.kernel_times.PACKAGE_KERNELS`; a tie within ``TIE`` keeps stock). The package then calls the
kernel's C shim and is named for the linears on it. Measured there (2 threads, Spec-Bench 30 x 96, T = 0, one
process, docs/results/2026-11-29-skinny-prefill-intel-f6m106): every linear on the kernel, plain decoding 1.03x and
the composite 1.38x the stock package's plain decoding (stock package: the composite 1.26x).

Exactness: both kernels compute every output exactly up to the grouping of its sums; the skinny kernel's grouping is
the same for every row count of a tree (its contract), so greedy speculation emits plain decoding's tokens on it too.

Where the rule (stock linears) stays: measuring switched off (:func:`~specdec.backends.kernel_times.measuring`: the
CPUs of ``RULE_KEPT``, ``SPECDEC_KERNELS=rule``), the CPUs of :data:`PACKAGE_RULE_KEPT`, a model that is not float32,
and a machine where the kernel cannot run (no compiler, no AVX2 and FMA: the reason is reported).
"""

from __future__ import annotations

import os

import torch
from torch import nn

from specdec.backends.aot import cached_package
from specdec.backends.cpu import cpu_info
from specdec.backends.kernel_times import PACKAGE_KERNELS, kernel_table, linear_shape, measuring, table_path
from specdec.backends.kernels import plain_linear, shared_copy
from specdec.backends.skinny import built, plain_linears, skinny_linears, unavailable

__all__ = ["PACKAGE_RULE_KEPT", "measured_package_cached", "package_kernels", "package_measures"]

#: CPUs whose package rows on the results page were measured with every linear stock: their packages keep that until
#: the row is measured again with this choice (``SPECDEC_KERNELS=measure`` measures there too), so that a choice made
#: on one CPU never costs another. ``(vendor, family, model)`` -> the row.
PACKAGE_RULE_KEPT: dict[tuple[str, str, str], str] = {
    ("AuthenticAMD", "25", "1"): "AMD Zen 3 (docs/results/2026-11-28-aot-zen3)",
}


def package_measures() -> bool:
    """Whether ``weights="auto"`` measures the package's kernels here: where the linears' kernels are measured
    (:func:`~specdec.backends.kernel_times.measuring`) and the CPU is not in :data:`PACKAGE_RULE_KEPT` (unless
    ``SPECDEC_KERNELS=measure``)."""
    info = cpu_info()
    kept = (info.get("vendor_id", ""), info.get("cpu family", ""), info.get("model", "")) in PACKAGE_RULE_KEPT
    return measuring() and (not kept or os.environ.get("SPECDEC_KERNELS") == "measure")


def package_kernels(model: nn.Module, cached_only: bool = False) -> tuple[int, str]:
    """``(swapped, reason)``: put each float32 CPU linear of ``model`` (in place) whose shape measured faster on the
    skinny kernel onto it, before its package is named; ``reason`` says what was decided and from which table, or
    why nothing was measured (``""`` where the rule applies without a reason worth reporting).

    ``cached_only`` (``static_shapes="auto"``, which never builds): decide only from a table and a kernel already on
    this machine, and keep the choice only where the package it names is cached too (else ``model`` is left stock).
    """
    linears = [m for m in model.modules() if plain_linear(m) and m.weight.dtype == torch.float32]
    if not linears or linears[0].weight.device.type != "cpu" or not package_measures():
        return 0, ""
    if cached_only and not (table_path(torch.float32, PACKAGE_KERNELS).exists() and built()):
        return 0, ""
    if (why := unavailable()) is not None:
        return 0, f"the package's linears stay stock: {why}"
    table = kernel_table([linear_shape(m) for m in linears], torch.float32, kernels=PACKAGE_KERNELS)
    swapped = skinny_linears(model, only=lambda linear: table.choice(linear_shape(linear)) == "skinny")
    if cached_only and swapped and cached_package(model) is None:
        plain_linears(model)
        return 0, ""
    source = f"{table_path(torch.float32, PACKAGE_KERNELS).name}; `specdec doctor` shows it"
    return swapped, f"{swapped} of {len(linears)} linears measured faster on the skinny kernel here ({source})"


def measured_package_cached(model: nn.Module) -> bool:
    """Whether this machine has the package of ``model`` with the measured kernels (:func:`package_kernels`, from
    cached measurements only); ``model`` itself is not changed."""
    variant = shared_copy(model)
    return package_kernels(variant, cached_only=True)[0] > 0
