"""The two backend choices, resolved once per model: how the weights run, and whether shapes are static.

* ``weights``: ``"stock"`` (as loaded), ``"packed"`` (linears prepacked for oneDNN: exact, float32 or bfloat16 CPU),
  ``"int8"`` (int8 linears: drafts only, never a target, since it approximates), or ``"auto"``: for a target, each
  linear on the kernel that measured fastest for its shape on this CPU, skinny (float32,
  :mod:`specdec.backends.skinny_choice`), packed or stock (:mod:`specdec.backends.measured`; with measuring off, the
  rule of :func:`~specdec.backends.kernels.packing_pays`), int8 for a draft, stock where none applies (not a CPU,
  not float32 or bfloat16, bfloat16 without native instructions or oneDNN; the reason is reported).
* ``static_shapes``: ``True`` runs every forward at a fixed, bucketed shape through ``torch.compile(fullgraph=True)``
  (:mod:`specdec.backends.compiled`: CUDA graphs on a GPU, inductor on a CPU), with plain weights (inductor packs them
  itself); ``"aot"`` (CPU) runs it from the model's ahead-of-time package (:mod:`specdec.backends.aot`: built once
  per machine, loaded in seconds; with ``weights="auto"`` its linears on the kernel measured faster per shape,
  :mod:`specdec.backends.skinny_choice`); ``False`` runs eagerly; ``"auto"``: on for CUDA, where graphs remove the
  launch overhead the static path exists for; on a CPU, from the model's package where this machine has one, else
  off: compiling there takes minutes (once per machine for a package), though every method ran faster on static
  shapes (plain decoding 1.77x, EAGLE-3 1.48x, the composite 1.44x the eager path; AMD Zen 3, results page).

:func:`prepare_model` applies both to a *copy* of the caller's model that shares its tensors
(:func:`~specdec.backends.kernels.shared_copy`), so the caller's model object is never changed; ``in_place=True``
transforms the model itself (no copy: the packed weights replace the plain ones), for callers that own the model.

Fallback contract: a model the fast path cannot serve runs stock with one :class:`FastPathWarning` that says why;
linears it cannot pack (subclasses such as quantized linears) are left as they are.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from typing import Literal

import torch
from torch import nn

from specdec.backends.aot import cached_package, package_attention_set, package_path
from specdec.backends.attention_choice import few_row_serves, skinny_forward
from specdec.backends.cpu import PACKED_DTYPES, cpu_gemm_profile, onednn_missing, packing_error, slow_dtype_reason
from specdec.backends.gqa import GQA_NAMES, GQA_SKINNY, SKINNY_NUMERICS, cache_dtype, set_attention, use_gqa_attention
from specdec.backends.kernels import (
    VOCAB_ROWS,
    FastPathWarning,
    own_memory,
    pack_linears,
    packed_linear,
    packing_pays,
    plain_linear,
    return_freed_memory,
    runs_packed,
    shared_copy,
    unpack_linears,
)
from specdec.backends.measured import auto_packs, dtype_cost, single_rows
from specdec.backends.norms import fuse_norms, unfuse_norms
from specdec.backends.numerics import INVARIANT_FIX, INVARIANT_NEEDS, Invariant, invariant_on
from specdec.backends.row_padding import padding_rows, set_pad_rows
from specdec.backends.row_probe import RowVariantKernelError, set_row_padding
from specdec.backends.skinny import coded_names, kernel_label, unavailable
from specdec.backends.skinny_choice import eager_kernels, measured_package_cached, package_kernels, skinny_measures
from specdec.backends.stacking import stack_projections, unstack_projections
from specdec.errors import BackendError

__all__ = [
    "WEIGHTS",
    "BackendError",
    "Execution",
    "Invariant",
    "StaticShapes",
    "Weights",
    "apply",
    "execution_label",
    "prepare_model",
    "resolve",
]

Weights = Literal["auto", "stock", "packed", "int8"]
WEIGHTS: tuple[str, ...] = ("auto", "stock", "packed", "int8")
StaticShapes = bool | Literal["auto", "aot"]
STATIC_MARK = "_specdec_static"  # set on a model prepared for static shapes


@dataclass(frozen=True)
class Execution:
    """How a model runs, as resolved by :func:`prepare_model`.

    Attributes:
        weights: ``"stock"``, ``"packed"`` (every linear), ``"packed-vocab"`` (the vocabulary projection only: the
            rule's choice on an Intel CPU with MKL), ``"packed-some"`` (another subset, as measured) or ``"int8"``.
        static: fixed-shape compiled forwards.
        aot: with ``static``, served by the model's ahead-of-time package (:mod:`specdec.backends.aot`, CPU) instead
            of compiling in this process.
        packed: linears swapped; skipped: linear-like modules left stock; attention: the attention implementation.
        skinny: linears on the skinny kernel (:mod:`specdec.backends.skinny_choice`); coded: of them, those on their
            weights' exact block codes (:mod:`specdec.backends.skinny_codes`); amx: of those, the ones on the codes'
            AMX form (:mod:`specdec.backends.skinny_amx`).
        reason: why a requested fast path was not (fully) applied, or why ``auto`` chose as it did; ``""`` if none.
        invariant: row-invariant numerics (:func:`apply`): a row's logits are bitwise the same in a 1-token step and
            in a tree forward of any size.
        norms: RMS norms running as one call (:mod:`specdec.backends.norms`; the same values).
        stacked: groups of projections run as one GEMM (``q/k/v``, ``gate/up``: :mod:`specdec.backends.stacking`).
        padded: with ``invariant``, packed linears that pad a single row to two (where this CPU's kernel needs it,
            :func:`~specdec.backends.row_probe.single_row_padding`).
        single_stock, single_skinny: packed linears that run a single row stock / on the skinny kernel, as measured
            faster here (:func:`~specdec.backends.measured.single_rows`); single_bytes: the plain weights they keep.
        skinny_forward: every linear and the attention on the skinny kernels, a row-invariant float32 forward
            (:func:`~specdec.backends.attention_choice.skinny_forward`); beside other linears, only a speed choice.
        pad_rows: fewer rows than this run padded to this many in the packed linears, as measured faster here
            (:mod:`specdec.backends.row_padding`); 1: none.
    """

    weights: str
    static: bool = False
    packed: int = 0
    skipped: int = 0
    attention: str = ""
    reason: str = ""
    invariant: bool = False
    norms: int = 0
    stacked: int = 0
    padded: int = 0
    aot: bool = False
    single_stock: int = 0
    single_skinny: int = 0
    single_bytes: int = 0
    skinny: int = 0
    coded: int = 0
    amx: int = 0
    skinny_forward: bool = False
    pad_rows: int = 1

    @property
    def static_shapes(self) -> StaticShapes:
        """The ``static_shapes`` choice that reproduces this execution on another holder of the model."""
        return "aot" if self.aot else self.static

    @property
    def cache_dtype(self) -> torch.dtype | None:
        """The KV cache's dtype this execution needs (:func:`specdec.backends.gqa.cache_dtype`: float64 for the
        invariant attention of row-invariant numerics, None (the model's) otherwise)."""
        return cache_dtype(self.attention)

    @property
    def label(self) -> str:
        """``"packed"``, ``"packed+pad5+attention"``, ``"stock+static"``, ``"stock+aot+skinny"``, ... (file names,
        stats)."""
        aot = "+aot" + "+skinny" * (self.skinny > 0) + "+coded" * (self.coded > 0) + "+amx" * (self.amx > 0)
        shapes = aot if self.aot else "+static" * self.static
        numerics = "+invariant" if self.invariant else "+attention" * (self.attention == GQA_SKINNY)
        return self.weights + f"+pad{self.pad_rows}" * (self.pad_rows > 1) + shapes + numerics

    def describe(self) -> str:
        """One line for a stats line or a log: what runs, and why where it was a fallback or a choice."""
        shapes = "static shapes (compiled)" if self.static else "eager shapes"
        shapes = "static shapes (ahead-of-time package)" if self.aot else shapes
        counts = ((self.packed, "linears"), (self.norms, "fused norms"), (self.stacked, "stacked projection groups"))
        counts += ((self.skinny, "linears on the skinny kernel"), (self.coded, "of them on their exact block codes"))
        counts += ((self.amx, "of those on the AMX form"),)
        counts = [f"{n} {what}" for n, what in counts if n]
        weights = f"{self.weights} weights" + (f" ({', '.join(counts)})" if counts else "")
        padded = f", {self.padded} linears padding single rows" if self.padded else ""
        weights += f", fewer than {self.pad_rows} rows padded to {self.pad_rows}" if self.pad_rows > 1 else ""
        runs = ((self.single_stock, "stock"), (self.single_skinny, "on the skinny kernel"))
        if runs := " and ".join(f"{n} of them running a single row {where}" for n, where in runs if n):
            weights += f", {runs} (plain weights kept: {self.single_bytes / 2**20:.0f} MB)"
        few = self.attention == GQA_SKINNY
        how = "few-row attention" if few else "float64 attention and KV cache"
        speed = ", few-row attention" * few  # chosen for speed (attention_choice), beside linears on other kernels
        numerics = SKINNY_NUMERICS if self.skinny_forward else speed
        numerics = f", row-invariant numerics ({how}{padded})" if self.invariant else numerics
        return f"{weights}, {shapes}{numerics}" + (f"; {self.reason}" if self.reason else "")


def _params(model: nn.Module) -> tuple[torch.device | None, torch.dtype | None]:
    for p in model.parameters():
        return p.device, p.dtype
    return None, None


def resolve(
    model: nn.Module, weights: str = "auto", static_shapes: StaticShapes = "auto", draft: bool = False
) -> tuple[str, bool, str]:
    """``(weights, static, reason)``: what the two choices become for ``model``.

    ``weights`` resolves to ``"stock"``, ``"packed"`` or ``"int8"`` (``"packed"`` may still pack only the vocabulary
    projection under ``"auto"``, decided by :func:`apply`); a fast choice that cannot serve the model resolves to
    ``"stock"`` with the reason (the caller warns).

    Raises:
        BackendError: an unknown name; ``"int8"`` for a target (it approximates the weights; a target runs exactly);
            static shapes with packed or int8 weights (inductor packs plain weights itself).
    """
    if weights not in WEIGHTS:
        raise BackendError(f"unknown weights {weights!r}; choose from {', '.join(WEIGHTS)}")
    if static_shapes not in (True, False, "auto", "aot"):
        raise BackendError(f"static_shapes must be True, False, 'auto' or 'aot', got {static_shapes!r}")
    if weights == "int8" and not draft:
        raise BackendError("weights 'int8' approximate the model and are for drafters only; a target runs exactly")
    device, dtype = _params(model)
    if static_shapes == "aot" and (device is None or device.type != "cpu"):
        raise BackendError(f"ahead-of-time packages (static_shapes='aot') run on a CPU; the model is on {device}")
    static = bool(static_shapes) if static_shapes != "auto" else _auto_static(model, device, draft, weights)
    if static:
        if weights in ("packed", "int8"):
            raise BackendError(
                f"static shapes compile plain weights (inductor packs them itself); use weights 'auto' or 'stock' "
                f"with static shapes, or weights {weights!r} with static_shapes=False"
            )
        return "stock", True, ""
    if weights == "stock":
        return "stock", False, ""
    if device is None or device.type != "cpu":
        return "stock", False, f"the model is on {device}, packed weights are CPU-only"
    if dtype not in PACKED_DTYPES:
        return "stock", False, f"the model is {dtype}; packed weights run float32 or bfloat16"
    if weights == "auto" and dtype == torch.bfloat16 and slow_dtype_reason(dtype):
        return "stock", False, _BF16_AUTO
    if missing := onednn_missing():
        return "stock", False, missing
    if draft and weights in ("auto", "int8"):
        if hasattr(torch.ops.quantized, "linear_dynamic") and "fbgemm" in torch.backends.quantized.supported_engines:
            return "int8", False, ""
        if weights == "int8":
            return "packed", False, "this torch build has no fbgemm dynamic int8 linear"
    unavailable = packing_error(dtype)  # tried on this CPU: oneDNN refuses bfloat16 without AVX-512 (or AVX-NE)
    return ("stock", False, unavailable) if unavailable else ("packed", False, "")


def _auto_static(model: nn.Module, device: torch.device | None, draft: bool, weights: str) -> bool:
    """``static_shapes="auto"``: on for CUDA; on a CPU, where this machine has the model's package (as ``"aot"`` built
    it: no process compiles then) and the weights asked for can run static (``"auto"``, ``"stock"``), else off."""
    if device is None or device.type != "cpu" or draft or weights not in ("auto", "stock"):
        return device is not None and device.type == "cuda"  # decided before any weights are hashed
    return cached_package(model) is not None or (weights == "auto" and measured_package_cached(model))


def _aot(model: nn.Module, static_shapes: StaticShapes) -> bool:
    """Whether a static model runs from its ahead-of-time package: asked for, or ``"auto"`` found one."""
    device = _params(model)[0]
    return static_shapes == "aot" or (static_shapes == "auto" and device is not None and device.type == "cpu")


def execution_label(model: nn.Module) -> str:
    """What a model currently runs, read from its modules: ``"stock+static"`` if prepared for static shapes
    (``"stock+aot"`` served by its package), ``"packed"`` if its linears are packed, ``"packed-vocab"`` if only its
    vocabulary projections are, ``"packed-some"`` if some other subset is (as measured), else ``"stock"``; then
    the skinny kernels' :func:`~specdec.backends.skinny.kernel_label` (``"+skinny+coded+amx"``)."""
    static, skinny = getattr(model, STATIC_MARK, False), kernel_label(model)
    if static:
        return ("stock+aot" if static == "aot" else "stock+static") + skinny
    modules = list(model.modules())
    if not any(runs_packed(m) for m in modules):
        return "stock" + skinny
    if not any(plain_linear(m) for m in modules):
        return "packed" + skinny
    vocab_only = all(packed_linear(m).out_features >= VOCAB_ROWS for m in modules if runs_packed(m))
    return ("packed-vocab" if vocab_only else "packed-some") + skinny


def _warn(warn: bool, what: str, reason: str) -> None:
    if warn:
        warnings.warn(f"{what}: {reason}", FastPathWarning, stacklevel=4)


def apply(
    model: nn.Module,
    weights: str = "auto",
    static_shapes: StaticShapes = "auto",
    warn: bool = True,
    own_tensors: bool = True,
    invariant: Invariant = "auto",
) -> Execution:
    """Put ``model`` itself on the resolved choices (pack or unpack its linears, switch its attention function).

    In place, for every holder of the model: :func:`prepare_model` calls it on a copy unless told otherwise.
    Idempotent. Weights ``"int8"`` (drafts) are not applied here (:func:`~specdec.backends.kernels.packed_copy`).
    ``own_tensors``: after packing, copy the remaining tensors out of a memory-mapped weights file
    (:func:`~specdec.backends.kernels.own_memory`); off for a copy whose tensors are the caller's.

    ``invariant``: row-invariant numerics, so that a row's logits are bitwise the same whether the row runs alone
    (a 1-token step) or inside a tree forward: single rows padded to two, and GEMMs of many rows run in blocks, in the
    packed linears whose kernel on this CPU needs it (:func:`~specdec.backends.row_probe.row_invariance` probes each
    shape; a kernel that is not row-invariant at all turns the numerics off with a warning, or raises
    ``BackendError`` for ``invariant=True``)
    and the invariant attention of :mod:`specdec.backends.gqa`
    (SDPA in float64 on a float64 KV cache, :attr:`Execution.cache_dtype`, rounded to the model's dtype). Greedy
    speculative output then equals vanilla greedy output token for token. ``"auto"`` (default) turns them on for a
    bfloat16 model whose linears are all packed (on AMD CPUs with native bfloat16; not yet on Intel, where ``auto``
    keeps bfloat16 linears stock), where without them greedy EAGLE-3 output differed from vanilla's on 19 of 20
    MT-bench prompts; float32 keeps the faster attention (its differences are ~1e-6 of a logit).

    Raises:
        BackendError: ``invariant=True`` where the model does not run every linear packed, on eager shapes, with
            SDPA attention (checked before the model is changed where the choices alone tell).
    """
    if invariant not in (True, False, "auto"):
        raise BackendError(f"invariant must be True, False or 'auto', got {invariant!r}")
    if invariant is True and static_shapes == "auto":  # asked for: eager shapes, even where a package is cached
        static_shapes = False
    if invariant is True:  # refuse before changing the model where the choices alone tell
        resolved, static, _ = resolve(model, weights, static_shapes)
        if static or resolved != "packed":
            what = "static shapes" if static else f"weights {weights!r}, which resolve to {resolved!r} on this CPU"
            raise BackendError(f"{INVARIANT_NEEDS}; this model would run {what} ({INVARIANT_FIX})")
    execution = _apply_weights(model, weights, static_shapes, warn, own_tensors, every=invariant is True)
    on, reason = invariant_on(invariant, execution, model)
    slow = _slow_dtype(model)
    if slow:  # the dtype is the caller's choice: kept, with one warning that also says what else it costs
        cost = dtype_cost(model, "stock" if execution.weights == "stock" else "packed") if warn else ""  # measures
        said = [slow, cost, execution.reason if execution.weights == "stock" else "", reason]
        _warn(warn, f"{_params(model)[1]} kept, without native instructions", "; ".join(r for r in said if r))
    elif reason:  # auto could not serve a low-precision model with them: say so once, not only in execution.reason
        _warn(warn, "row-invariant numerics off", reason)
    try:
        padded = set_row_padding(model, on)  # probes this CPU's kernels (row_probe.row_invariance)
    except RowVariantKernelError as error:
        if invariant is True:
            raise BackendError(f"row-invariant numerics cannot be served on this CPU: {error}") from error
        on, padded = False, set_row_padding(model, False)
        reason = f"row-invariant numerics off: {error}; greedy output may differ from vanilla's at near-ties"
        _warn(warn, "row-invariant numerics off", str(error))
    auto = weights == "auto" and not on  # row-invariant numerics: a row runs the tree's kernel
    skinny = auto and _params(model)[1] == torch.float32 and skinny_measures() and unavailable() is None
    single, kept = single_rows(model, on=auto, skinny=skinny)
    attention = execution.attention
    if attention in GQA_NAMES:
        attention = use_gqa_attention(model, invariant=on)
    pad_rows = padding_rows(model) if auto else 1  # times the model as it now runs (static shapes: nothing packed)
    set_pad_rows(model, pad_rows)
    reason = "; ".join(r for r in (execution.reason, reason) if r)
    return replace(
        execution,
        attention=attention,
        skinny_forward=attention == GQA_SKINNY and skinny_forward(model),
        reason=reason,
        invariant=on,
        coded=len(coded_names(model)),
        amx=sum("@amx" in name for name in coded_names(model)),
        padded=padded,
        single_stock=single.get("stock", 0),
        single_skinny=single.get("skinny", 0),
        single_bytes=kept,
        pad_rows=pad_rows,
    )


_BF16_AUTO = (
    "auto packs bfloat16 weights only on CPUs with native bfloat16 instructions (avx512_bf16 or amx_bf16); "
    "weights='packed' packs them wherever oneDNN can"
)


def _apply_weights(
    model: nn.Module, weights: str, static_shapes: StaticShapes, warn: bool, own_tensors: bool, every: bool = False
) -> Execution:
    """:func:`apply` without the numerics choice. ``every``: ``invariant=True`` asked for them, so ``auto`` packs every
    linear the skinny kernel does not take (that kernel only where the few-row attention serves the model), whatever
    the table or the rule says: stock GEMMs are not row-invariant, and noise must not turn the ask into an error."""
    skinny_ok = not every or few_row_serves(model)  # invariant float32: skinny linears, few-row attention
    resolved, static, reason = resolve(model, weights, static_shapes)
    dtype, slow = _params(model)[1], _slow_dtype(model)
    aot = static and _aot(model, static_shapes)
    skinny, why = package_kernels(model, cached_only=static_shapes != "aot") if aot and weights == "auto" else (0, "")
    if aot:  # the package's name, from the model as given (before the attention switch below changes its config)
        package_path(model)
    setattr(model, STATIC_MARK, "aot" if aot else static)
    if static:  # plain linears for inductor (or the skinny kernel's, as measured), GQA attention without copies
        _restore(model)
        attention = package_attention_set(model) if aot else use_gqa_attention(model)  # a package: the name's choice
        return Execution("stock", True, attention=attention, reason=why, aot=aot, skinny=skinny)
    if resolved == "stock":
        _restore(model)
        if getattr(getattr(model, "config", None), "_attn_implementation", None) in GQA_NAMES:
            set_attention(model, "sdpa")
        if reason and weights != "stock" and not slow:  # a slow dtype has said it already: one warning
            _warn(warn, "fast path off, running stock", reason)
        return Execution("stock", reason=reason)
    try:
        already = execution_label(model) != "stock"
        profile = cpu_gemm_profile() if weights == "auto" else "onednn"
        pays, measured = (lambda lin: every or packing_pays(lin, profile)), ""
        if weights == "auto" and not every:  # measured on this CPU unless switched off (then the rule above)
            pays, measured = auto_packs(model, pays)
        skinny, chose = eager_kernels(model) if weights == "auto" and skinny_ok else (0, "")  # before the rest packs
        packed, skipped = pack_linears(model, only=pays)
        if packed and not already and own_tensors:
            own_memory(model)
            return_freed_memory()  # the released plain weights' pages
    except RuntimeError as e:  # an op missing or failing in this torch build: undo and run stock
        _restore(model)
        reason = f"oneDNN weight packing failed ({e})"
        _warn(warn, "fast path off, running stock", reason)
        return Execution("stock", reason=reason)
    attention = use_gqa_attention(model, skinny=True if weights == "auto" else None)  # where asked and it fits
    if skinny and not packed:
        return Execution(execution_label(model), attention=attention, reason=chose, skinny=skinny)
    if skipped:
        reason = f"{skipped} projection(s) are not plain nn.Linear (quantized or Conv1D) and run stock"
        _warn(warn, "fast path partial", reason)
    if not packed and (measured or profile == "mkl") and any(plain_linear(m) for m in model.modules()):
        # a choice, not a fallback: the stock kernels measured faster here, or (the rule) MKL runs these linears
        # faster than the packed kernel on an Intel CPU (float32) and packed bfloat16 is not measured there yet
        if attention in GQA_NAMES:
            set_attention(model, "sdpa")
        why = "MKL on this Intel CPU runs every linear of this model faster unpacked"
        if dtype == torch.bfloat16:
            why = "packed bfloat16 is not measured on an Intel CPU yet, so it runs stock; weights='packed' packs it"
        return Execution("stock", reason=f"{measured}: stock ran every linear faster" if measured else why)
    if not packed:
        reason = reason or "the model has no plain nn.Linear projections"
        _warn(warn, "fast path off, running stock", reason)
        return Execution("stock", False, 0, skipped, attention, reason)
    label = execution_label(model)
    if label != "packed" and not measured:
        reason = reason or "vocabulary projection only: MKL runs the smaller linears faster on this Intel CPU"
    reason = "; ".join(r for r in (measured, chose, reason) if r)
    norms, stacked = fuse_norms(model), stack_projections(model)
    if stacked:
        return_freed_memory()  # the separate packed projections' pages (on a copy too: they were the copy's own)
    return Execution(label, False, packed, skipped, attention, reason, norms=norms, stacked=stacked, skinny=skinny)


def _slow_dtype(model: nn.Module) -> str | None:
    """Why ``model``'s dtype runs slowly on this CPU (:func:`~specdec.backends.cpu.slow_dtype_reason`), or None."""
    device, dtype = _params(model)
    return slow_dtype_reason(dtype) if device is not None and device.type == "cpu" and dtype is not None else None


def _restore(model: nn.Module) -> None:
    """The model's own modules back: norms, projections (unstacked, then unpacked), linears."""
    unfuse_norms(model)
    unstack_projections(model)
    unpack_linears(model)


def _is_prepared(model: nn.Module, weights: str, static_shapes: StaticShapes) -> bool:
    """``model`` already runs what :func:`apply` would make of it, in eval mode (so no copy is needed)."""
    resolved, static, _ = resolve(model, weights, static_shapes)
    return not model.training and resolved == "stock" and not static and execution_label(model) == "stock"


def prepare_model(
    model: nn.Module,
    weights: str = "auto",
    static_shapes: StaticShapes = "auto",
    in_place: bool = False,
    warn: bool = True,
    invariant: Invariant = "auto",
) -> tuple[nn.Module, Execution]:
    """The model to run (eval mode) and how it runs, without changing ``model`` unless ``in_place``.

    A stock model that stays stock is used as it is; otherwise the choices are applied to a
    :func:`~specdec.backends.kernels.shared_copy` (same tensors, new modules and config), so the caller's object,
    its attention implementation and its training flag stay as they were. Packed weights then cost their size on
    top of the caller's model; ``in_place=True`` swaps them into ``model`` itself instead (a caller that owns it:
    the command line, the benchmarks).
    """
    copied = not in_place and not _is_prepared(model, weights, static_shapes)
    if copied:
        model = shared_copy(model)
    execution = apply(model, weights, static_shapes, warn, own_tensors=not copied, invariant=invariant)
    return model.eval(), execution
