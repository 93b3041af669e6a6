"""Kernels chosen by measurement on the CPU at hand: every linear shape of a model timed on each candidate, once.

``weights="auto"`` packs a linear where the packed kernel measured faster *on this machine*, instead of a rule
written for one vendor (:func:`~specdec.backends.kernels.packing_pays`, which stays the choice where measuring is
switched off). The candidates per shape are the kernels a target can run exactly: ``stock`` (``F.linear``: MKL's
sgemm for float32, whatever this torch build runs for bfloat16) and ``packed`` (:class:`~specdec.backends.kernels.
PackedLinear`, where oneDNN can pack the dtype here). Both give a row the same values up to the grouping of its sums;
the row-invariant numerics probe whichever runs (:mod:`~specdec.backends.row_probe`). A third candidate, MKL's packed
sgemm for tree rows, ran a tree forward of 8 rows 0.84-0.91x as long but paid nothing end to end for its memory
(docs/results/2026-11-29-mkl-rows-intel-f6m106): taken out.

One row on another kernel, the rest packed (:func:`single_rows`): where a packed shape's single row measured faster
stock or on the skinny kernel (by more than :data:`~specdec.backends.kernel_times.TIE`), the packed linear keeps a plain
copy of its weight and runs a 1-token step's row there, larger row counts packed. Intel Xeon family 6 model 106:
MKL's GEMV beat oneDNN on every packed shape's single row (the eager 1-token step 0.79-0.85x, 304 MB of plain float32
weights for SmolLM2: docs/results/2026-11-29-intel-f6m106). AMD Zen 4: the skinny kernel ran SmolLM2's linears on one
row in 0.76x packed's time, and packed held trees of 16 rows at 1.10x its one row where the kernel took 2.5x
(docs/results/2026-11-30-amd-f25m17). Only under ``weights="auto"`` and without row-invariant numerics (a row's
kernel must then be the tree's).

The timing, the table and its cache, and which CPUs measure: :mod:`specdec.backends.kernel_times`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from specdec.backends.kernel_times import (
    COLD_BYTES,
    EAGER_KERNELS,
    EAGER_ROWS,
    KERNELS,
    ROWS,
    RULE_KEPT,
    TIE,
    KernelTable,
    Shape,
    kernel_table,
    linear_shape,
    machine_key,
    measuring,
    rule_kept,
    sides,
    stacked_shape,
    table_path,
    time_shape,
)
from specdec.backends.kernels import plain_linear, runs_packed
from specdec.backends.row_padding import packed_linears, pad_label
from specdec.backends.skinny import load
from specdec.backends.stacking import stackable_groups

__all__ = [  # the timing names are kernel_times', here too for the callers that read them here
    "auto_packs",
    "COLD_BYTES",
    "dtype_cost",
    "KERNELS",
    "ROWS",
    "KernelTable",
    "kernel_table",
    "linear_shape",
    "stacked_shape",
    "machine_key",
    "measuring",
    "row_kernels",
    "rule_kept",
    "RULE_KEPT",
    "model_shapes",
    "model_table",
    "sides",
    "single_rows",
    "table_path",
    "time_shape",
]


def auto_packs(model: nn.Module, rule: Callable[[nn.Linear], bool]) -> tuple[Callable[[nn.Linear], bool], str]:
    """``(pack, reason)``: which of ``model``'s plain linears ``weights="auto"`` packs, by this machine's measured
    table where :func:`measuring` (``rule`` for shapes it could not decide), else by ``rule``; ``reason`` says which."""
    linears = [m for m in model.modules() if plain_linear(m)]
    if not linears or not measuring():
        return rule, ""
    dtype = linears[0].weight.dtype
    table, groups = model_table(model)
    stacked = {id(m) for group, wins in groups if wins for m in group}

    def pack(linear: nn.Linear) -> bool:
        if id(linear) in stacked:
            return True
        chosen = table.choice(linear_shape(linear))
        return rule(linear) if chosen is None else chosen == "packed"

    return pack, f"kernels chosen by measurement on this CPU ({table_path(dtype).name}; `specdec doctor` shows it)"


def single_rows(model: nn.Module, on: bool = True, skinny: bool = False) -> tuple[dict[str, int], int]:
    """``({kernel: linears}, bytes)``: with ``on`` (and :func:`measuring`), every packed linear of ``model`` (a
    stacked group's once) whose shape's single row measured faster on another kernel here runs one row there on a
    kept plain weight (:meth:`~specdec.backends.kernels.PackedLinear.single_rows`), the other row counts packed; the
    bytes those plain weights add. The candidates are stock, and with ``skinny`` (the caller's check that the skinny
    kernel is measured and runs here) the skinny kernel too, from the eager table
    (:data:`~specdec.backends.kernel_times.EAGER_KERNELS`). Off: none does (row-invariant numerics need a row's kernel
    to be the tree's)."""
    linears = packed_linears(model)
    if not linears:
        return {}, 0
    shapes = [linear_shape(lin) for lin in linears]
    table = None
    if on and measuring():
        eager = {"kernels": EAGER_KERNELS, "rows": EAGER_ROWS} if skinny and linears[0].dtype == torch.float32 else {}
        table = kernel_table(shapes, linears[0].dtype, **eager)
    chosen = [None if table is None else table.single_row_kernel(shape) for shape in shapes]
    if "skinny" in chosen:
        load()  # the op (a table read from the cache measured nothing in this process)
    added = sum(lin.single_rows(kernel) for lin, kernel in zip(linears, chosen, strict=True))
    counts = {k: chosen.count(k) for k in ("stock", "skinny") if k in chosen}
    return counts, added


def row_kernels(model: nn.Module) -> str:
    """``"+1stock"`` / ``"+1skinny"`` (both where both run) where some packed linears of ``model`` run a single row
    on that kernel, and ``"+pad5"`` where few rows pad to 5 (:func:`~specdec.backends.row_padding.pad_label`), else
    ``""`` (a cost curve's name carries it: the same weights label runs a 1-token step on other kernels)."""
    kinds = {lin.single_row_kernel for lin in packed_linears(model)} - {None}
    return "".join(f"+1{k}" for k in sorted(kinds)) + pad_label(model)


def dtype_cost(model: nn.Module, kernel: str) -> str:
    """What ``model``'s dtype costs on this CPU against float32, from the two dtypes' tables (measured if not cached):
    the summed time of its linears running ``kernel`` over float32's faster kernel per shape, for 1 row (a 1-token
    step) and 8 rows (a draft tree); ``""`` where not :func:`measuring` or a shape could not be measured.

    Measured on AMD Zen 3 (no native bfloat16, stock bfloat16 linears, SmolLM2; two tables measured apart):
    0.60-0.61x float32's time for 1 row (half the bytes, and a 1-token step is memory-bound) and 2.41-2.81x for 8
    rows (every product converted): vanilla decoding gains, trees lose."""
    linears = [m for m in model.modules() if plain_linear(m) or runs_packed(m)]  # stacked members as themselves
    dtype = next(model.parameters()).dtype
    if not linears or not measuring():
        return ""
    shapes = [linear_shape(m) for m in linears]
    low, fp32 = kernel_table(shapes, dtype), kernel_table(shapes, torch.float32)
    names = [KernelTable.name(s) for s in shapes]
    if any(n not in low.ms or kernel not in low.ms[n] or n not in fp32.ms for n in names):
        return ""
    ratio = {
        n: sum(low.ms[s][kernel][str(n)] for s in names)
        / sum(min(k[str(n)] for k in fp32.ms[s].values()) for s in names)
        for n in ROWS
    }
    return (
        f"measured here, its linears take {ratio[1]:.2f}x float32's time for 1 row (a 1-token step) and "
        f"{ratio[8]:.2f}x for 8 rows (a draft tree)"
    )


def model_shapes(model: nn.Module) -> tuple[list[nn.Linear], list[list[nn.Linear]], list[Shape]]:
    """``(linears, groups, shapes)``: ``model``'s plain linears, its stackable groups of plain linears, and the shapes
    a table over them times (each linear's, then each group's stacked shape)."""
    linears = [m for m in model.modules() if plain_linear(m)]
    groups = [g for g in stackable_groups(model) if all(plain_linear(m) for m in g)]
    return linears, groups, [linear_shape(m) for m in linears] + [stacked_shape(g) for g in groups]


def model_table(model: nn.Module, refresh: bool = False) -> tuple[KernelTable, list[tuple[list[nn.Linear], bool]]]:
    """This machine's table over ``model``'s plain linears and its stackable groups' stacked shapes, and per group
    whether its stacked packed GEMM beats its members run stock (then the group is packed whole, and stacked)."""
    linears, groups, shapes = model_shapes(model)
    table = kernel_table(shapes, linears[0].weight.dtype, refresh=refresh)
    decided = []
    for group in groups:
        stacked = table.cost(stacked_shape(group), "packed")
        members = [table.cost(linear_shape(m), "stock") for m in group]
        decided.append((group, stacked is not None and None not in members and stacked < (1 - TIE) * sum(members)))
    return table, decided
