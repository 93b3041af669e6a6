"""Which linears run on the skinny kernel (:mod:`specdec.backends.skinny`), measured on the CPU at hand.

The skinny kernel holds 8 rows of a draft tree near one row's cost where it runs; the stock and packed GEMMs do not
(T(8)/T(1) 1.44-1.62 for SmolLM2's package on the Intel Xeon of family 6 model 106). Under ``weights="auto"`` a
float32 CPU target puts each linear on the kernel where its shape measured faster there, by ``T(1) + T(8)`` over cold
weights (:mod:`specdec.backends.kernel_times`; a tie within ``TIE`` keeps the other choice):

* served by its ahead-of-time package (:func:`package_kernels`): against stock (inductor's GEMMs there), from the
  table of :data:`~specdec.backends.kernel_times.PACKAGE_KERNELS`; the package calls the kernel's C shim and is named
  for the linears on it. Measured (Spec-Bench 30 x 96, T = 0, one process,
  docs/results/2026-11-29-skinny-prefill-intel-f6m106): every linear on the kernel, plain decoding 1.03x and the
  composite 1.38x the stock package's plain decoding (stock package: the composite 1.26x). The shapes' choice is
  then confirmed by timing the whole packages (:mod:`~specdec.backends.package_verdict`: on the AMD Zen 4 every shape
  "won" and the package ran one row 1.45x slower), and undone where the stock package wins;
* on eager shapes (:func:`eager_kernels`): against both stock and packed (as ``auto`` runs packed: its single row
  on stock or on the kernel where faster), by ``T(1) + T(8) + T(16)``
  (:data:`~specdec.backends.kernel_times.EAGER_ROWS`), before the rest is packed. Measured on the Intel Xeon of family
  6 model 106 (12 Spec-Bench prompts x 96, T = 0, one process): plain decoding 1.02x, EAGLE-3 1.05x and the
  composite 1.28x the eager packed choice's plain decoding (the packed choice's composite: 1.22x), with no packed
  copies kept. On AMD Zen 4, where oneDNN's packed GEMM holds 16 rows near one row's time, the kernel takes a packed
  linear's single row instead (:func:`~specdec.backends.measured.single_rows`).

Where a linear's float32 weight is exact block codes (a GGUF file's, :mod:`specdec.backends.skinny_codes`), the
kernel's coded form (the same output bits, a third of the bytes) is timed too (``coded``, in the tables of
:data:`~specdec.backends.kernel_times.CODED_KERNELS` and ``PACKAGE_CODED``) and the linear takes whichever of its two
forms timed faster; ``SPECDEC_CODES=off`` leaves it out. On the Intel Xeon of family 6 model 207 SmolLM2's package
ran a 1-token step in 0.55x the time without codes (docs/results/2026-12-01-codes-intel-f6m207).

Exactness: every kernel computes each output exactly up to the grouping of its sums; the skinny kernel's grouping is
the same for every row count of a tree (its contract), so greedy speculation emits plain decoding's tokens on it too.
Row-invariant numerics asked for (``invariant=True``) keep every linear packed.

Where the rule stays (no linear on the kernel): ``SPECDEC_SKINNY=off``, measuring switched off
(:func:`~specdec.backends.kernel_times.measuring`: the CPUs of ``RULE_KEPT``, ``SPECDEC_KERNELS=rule``), the CPUs of
:data:`SKINNY_RULE_KEPT`, a model that is not float32, and a machine where the kernel cannot run (no compiler, no AVX2
and FMA: the reason is reported).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch
from torch import nn

from specdec.backends.aot import cached_package
from specdec.backends.cpu import cpu_info, cpu_key
from specdec.backends.kernel_times import (
    CODED_KERNELS,
    EAGER_KERNELS,
    EAGER_ROWS,
    PACKAGE_CODED,
    PACKAGE_KERNELS,
    TIE,
    KernelTable,
    kernel_table,
    linear_shape,
    measuring,
    stacked_shape,
    table_path,
)
from specdec.backends.kernels import plain_linear, return_freed_memory, shared_copy
from specdec.backends.measured import model_shapes, model_table
from specdec.backends.package_verdict import recorded, verdict_path, verdict_text
from specdec.backends.skinny import built, plain_linears, skinny_linears, skinny_names, unavailable
from specdec.backends.skinny_amx import AMX_KERNELS, amx_form, amx_timed, amx_unavailable
from specdec.backends.skinny_codes import Codes, exact_codes

__all__ = [
    "SKINNY_RULE_KEPT",
    "codes_off",
    "eager_kernels",
    "measured_package_cached",
    "package_kernels",
    "skinny_measures",
    "skinny_off",
    "table_kernels",
]

#: CPUs whose rows on the results page were measured before the skinny kernel was a candidate: they keep their choice
#: until the row is measured again with it (``SPECDEC_KERNELS=measure`` measures there too), so that a choice made
#: on one CPU never costs another. ``(vendor, family, model)`` -> the row.
SKINNY_RULE_KEPT: dict[tuple[str, str, str], str] = {
    ("AuthenticAMD", "25", "1"): "AMD Zen 3 (docs/results/2026-11-28-aot-zen3)",
}


def skinny_off() -> bool:
    """Whether ``SPECDEC_SKINNY=off`` keeps the skinny kernels out (``auto``, the default, does not)."""
    switch = os.environ.get("SPECDEC_SKINNY", "auto")
    if switch not in ("auto", "off"):
        raise ValueError(f"SPECDEC_SKINNY must be 'auto' or 'off', got {switch!r}")
    return switch == "off"


def codes_off() -> bool:
    """Whether ``SPECDEC_CODES=off`` keeps weights' exact block codes out of the choice (``auto``, the default, times
    them where a model has them: :mod:`specdec.backends.skinny_codes`)."""
    switch = os.environ.get("SPECDEC_CODES", "auto")
    if switch not in ("auto", "off"):
        raise ValueError(f"SPECDEC_CODES must be 'auto' or 'off', got {switch!r}")
    return switch == "off"


def skinny_measures() -> bool:
    """Whether ``weights="auto"`` measures the skinny kernel here: where the linears' kernels are measured
    (:func:`~specdec.backends.kernel_times.measuring`) and the CPU is not in :data:`SKINNY_RULE_KEPT` (unless
    ``SPECDEC_KERNELS=measure``); never with ``SPECDEC_SKINNY=off`` (no build, no measurement: the test suite, or a
    machine that should keep torch's own kernels)."""
    if skinny_off():
        return False
    kept = cpu_key(cpu_info()) in SKINNY_RULE_KEPT
    return measuring() and (not kept or os.environ.get("SPECDEC_KERNELS") == "measure")


def package_kernels(model: nn.Module, cached_only: bool = False) -> tuple[int, str]:
    """``(swapped, reason)``: put each float32 CPU linear of ``model`` (in place) whose shape measured faster on the
    skinny kernel onto it, before its package is named; ``reason`` says what was decided and from which table, or
    why nothing was measured (``""`` where the rule applies without a reason worth reporting).

    ``cached_only`` (``static_shapes="auto"``, which never builds): decide only from a table and a kernel already on
    this machine, and keep the choice only where the package it names is cached too (else ``model`` is left stock).
    A verdict of the whole packages recorded for this choice (:mod:`~specdec.backends.package_verdict`) that says
    stock puts every linear back.
    """
    linears, already = _candidates(model), len(skinny_names(model))
    coded = _coded(linears) if linears and (built() or not cached_only) else {}
    kernels = _with_amx(PACKAGE_CODED, True) if coded else PACKAGE_KERNELS  # the table this model's choice reads
    if not linears:
        swapped, reason = already, ""
    elif cached_only and not (table_path(torch.float32, kernels).exists() and built()):
        return 0, ""
    elif (why := unavailable()) is not None:
        return 0, f"the package's linears stay stock: {why}"
    else:
        table = kernel_table([linear_shape(m) for m in linears], torch.float32, kernels=kernels)
        mine = _form(table, coded)

        def wins(linear: nn.Linear) -> bool:  # without codes, the table's own choice of two kernels
            if not coded:
                return table.choice(linear_shape(linear)) == "skinny"
            cost, stock = mine(linear)[0], table.cost(linear_shape(linear), "stock")
            return cost is not None and stock is not None and cost < (1 - TIE) * stock

        swapped, reason = _swap(model, linears, already, wins, table_path(torch.float32, kernels).name, coded, mine)
    verdict = recorded(model) if swapped else None
    if verdict is not None and verdict["choice"] == "stock":  # the whole packages timed: stock ran faster
        plain_linears(model)
        return 0, f"the package's linears stay stock: {verdict_text(verdict)} ({verdict_path().name})"
    if cached_only and swapped and cached_package(model) is None:
        plain_linears(model)
        return 0, ""
    return swapped, reason


def eager_kernels(model: nn.Module) -> tuple[int, str]:
    """``(swapped, reason)``: on eager shapes, put each float32 CPU linear of ``model`` (in place) whose shape's
    skinny ``T(1) + T(8) + T(16)`` beat both stock and packed (not within ``TIE``; packed's single row on whichever
    kernel runs it faster) onto the kernel, before the rest is packed; ``reason`` says what was decided and from which
    table, or why nothing was measured. A stackable group (``q/k/v``, ``gate/up``) that ``auto`` would pack stacked
    (:func:`~specdec.backends.measured.model_table`) stays off the kernel where its one stacked packed GEMM costs no
    more than its members each on its own best kernel (AMD Zen 4: ``q/k/v`` 0.35 ms stacked for 1 + 8 + 16 rows,
    0.49 ms on the kernel, where ``k`` and ``v`` alone beat packed); the table also holds the stacked shapes, whose
    single rows :func:`~specdec.backends.measured.single_rows` decides once they are packed."""
    linears, already = _candidates(model), len(skinny_names(model))
    if not linears:
        return already, ""
    if (why := unavailable()) is not None:
        return 0, f"no linear on the skinny kernel: {why}"
    coded = _coded(linears)
    kernels = _with_amx(CODED_KERNELS, False) if coded else EAGER_KERNELS
    table = kernel_table(model_shapes(model)[2], torch.float32, kernels=kernels, rows=EAGER_ROWS)
    mine = _form(table, coded)

    def rivals(linear: nn.Linear) -> list[float]:
        return [c for c in (table.cost(linear_shape(linear), k) for k in ("stock", "packed")) if c is not None]

    def alone(linear: nn.Linear) -> bool:
        cost, others = mine(linear)[0], rivals(linear)
        return cost is not None and bool(others) and cost < (1 - TIE) * min(others)

    own = frozenset(id(m) for m in linears if alone(m))  # each linear's own verdict, before the groups'

    def best(linear: nn.Linear) -> float | None:
        return mine(linear)[0] if id(linear) in own else min(rivals(linear), default=None)

    on = set(own)
    for group, stacks in model_table(model)[1]:  # a group that packs stacked, its one GEMM no dearer: all off
        members, together = [best(m) for m in group], table.cost(stacked_shape(group), "packed")
        if stacks and together is not None and None not in members and not sum(members) < (1 - TIE) * together:
            on -= {id(m) for m in group}
    source = table_path(torch.float32, kernels, EAGER_ROWS).name
    return _swap(model, linears, already, lambda linear: id(linear) in on, source, coded, mine)


def _coded(linears: list[nn.Linear]) -> dict[int, Codes]:
    """The exact block codes of each of ``linears`` that has them, by ``id`` (none with ``SPECDEC_CODES=off``); the
    check's freed temporaries are given back to the system."""
    if codes_off():
        return {}
    coded = {id(m): c for m in linears if (c := exact_codes(m.weight)) is not None}
    return_freed_memory()
    return coded


def table_kernels(linears: list[nn.Linear]) -> tuple[tuple[str, ...], tuple[str, ...], str]:
    """``(eager, package, about)``: the candidates of the two tables ``auto`` consults for ``linears`` (with the coded
    form where some have exact block codes) and a line saying how many have them (``specdec doctor``)."""
    coded = _coded(linears)
    if not coded:
        return EAGER_KERNELS, PACKAGE_KERNELS, "no linear's weight is exact block codes"
    schemes = sorted({c.scheme for c in coded.values()})
    about = f"{len(coded)} of {len(linears)} linears' weights are exact block codes ({', '.join(schemes)})"
    eager, package = _with_amx(CODED_KERNELS, False), _with_amx(PACKAGE_CODED, True)
    if package != PACKAGE_CODED:
        about += f"; their AMX forms are timed too ({'eager and package' if eager != CODED_KERNELS else 'package'})"
    return eager, package, about


def _with_amx(kernels: tuple[str, ...], package: bool) -> tuple[str, ...]:
    """``kernels`` and the coded kernel's AMX forms where they run here (:mod:`specdec.backends.skinny_amx`) and
    ``SPECDEC_AMX`` times them for this table (:func:`~specdec.backends.skinny_amx.amx_timed`)."""
    return kernels if not amx_timed(package) or amx_unavailable() is not None else (*kernels, *AMX_KERNELS)


def _form(table: KernelTable, coded: dict[int, Codes]) -> Callable[[nn.Linear], tuple[float | None, str]]:
    """A linear's ``(cost, form)`` on the skinny kernel in ``table``: on its exact codes where it has them, by the
    AVX kernel (``"coded"``) or on the tile unit (its :func:`~specdec.backends.skinny_amx.amx_form`, where the table
    timed it), whichever times fastest, else on its float32 weight (``"skinny"``); the cost None where not measured.
    Each form is one numerics for every row count (the AMX form's differs from the others' by float32 rounding)."""
    timed = AMX_KERNELS[0] in table.key.get("kernels", ())
    amx = {key: amx_form(c) for key, c in coded.items()} if timed else {}

    def mine(linear: nn.Linear) -> tuple[float | None, str]:
        forms = ("skinny",) if id(linear) not in coded else ("skinny", "coded", *amx.get(id(linear), "").split())
        costs = [(c, form) for form in forms if (c := table.cost(linear_shape(linear), form)) is not None]
        return min(costs, default=(None, "skinny"))

    return mine


def _swap(
    model: nn.Module,
    linears: list[nn.Linear],
    already: int,
    wins: Callable[[nn.Linear], bool],
    table: str,
    coded: dict[int, Codes],
    mine: Callable[[nn.Linear], tuple[float | None, str]],
) -> tuple[int, str]:
    """Put the ``linears`` of ``model`` that ``wins`` on the kernel, on their exact block codes (``coded``, by ``id``)
    where ``mine`` says they time faster so; ``(on the kernel, reason)``, counting the ``already`` there from a
    previous preparation (idempotent); ``table``: the deciding table's file name."""
    forms = {id(m): mine(m)[1] for m in linears if id(m) in coded and wins(m)}
    codes = {key: coded[key] for key, form in forms.items() if form != "skinny"}
    on_amx = {key for key, form in forms.items() if form in AMX_KERNELS}
    swapped = already + skinny_linears(
        model, only=wins, codes=lambda linear: codes.get(id(linear)), amx=lambda linear: id(linear) in on_amx
    )
    source = f"{table}; `specdec doctor` shows it"
    total = already + len(linears)
    schemes = sorted({c.scheme for c in codes.values()})
    amx = f", {len(on_amx)} of them on the AMX form" if on_amx else ""
    coded = f", {len(codes)} on their weights' exact block codes ({', '.join(schemes)}){amx}" if codes else ""
    return swapped, f"{swapped} of {total} linears measured faster on the skinny kernel here{coded} ({source})"


def _candidates(model: nn.Module) -> list[nn.Linear]:
    """``model``'s plain float32 CPU linears where the kernel is measured here, else none."""
    linears = [m for m in model.modules() if plain_linear(m) and m.weight.dtype == torch.float32]
    return linears if linears and linears[0].weight.device.type == "cpu" and skinny_measures() else []


def measured_package_cached(model: nn.Module) -> bool:
    """Whether this machine has the package of ``model`` with the measured kernels (:func:`package_kernels`, from
    cached measurements only); ``model`` itself is not changed."""
    variant = shared_copy(model)
    return package_kernels(variant, cached_only=True)[0] > 0
