"""Execution backends: a transformation of a loaded model, never a second decoding loop.

The decoding loop, the target adapter and the drafters always run the model's own (Hugging Face or head) forward;
a backend only changes *how* that forward executes:

* ``"stock"``: the model as loaded.
* ``"compile"``: the static-shape compiled path (:mod:`specdec.compiled`). The model keeps plain linears (inductor
  packs them itself when it freezes the weights, for MKL's GEMM on an x86 CPU) and the copy-free GQA attention;
  the target adapter switches its cache to static layers and runs every tree forward through
  ``torch.compile(fullgraph=True)`` at a few bucketed sizes (inductor on a CPU, CUDA graphs on a GPU). EAGLE
  drafters run their head's plain linears in fixed-shape steps compiled the same way
  (:class:`specdec.drafters.eagle.EagleDrafterBase`); a small-LM drafter cut from the target's layers runs those
  (plain, shared) layers eagerly.
* ``"cpu-packed"`` (the default on CPU for float32 models): every ``nn.Linear`` is swapped for a
  :class:`PackedLinear` whose weight was reordered once into oneDNN's blocked layout, and grouped-query attention
  runs through SDPA's ``enable_gqa`` (registered with transformers' ``AttentionInterface`` as
  ``"specdec_sdpa"``) instead of copying every layer's keys/values to all query heads under a mask.

Why prepacking (measured on the 2-core AMD EPYC, 2 threads, see ``benchmarks/fastpath.py`` and the results page):
MKL's ``sgemm`` runs small-row GEMMs (1-32 rows, the shape of a draft tree) at a fraction of the bandwidth and packs
the weight on every call; the prepacked oneDNN kernel runs them near the cost of one row. ``torch.compile`` (inductor
with freezing does the same packing plus fusion) measured a similar 1-token step after a two-minute compile per
shape on 2 cores, so the compiled cycle is left to the static-shape path (a backend choice on the same switch).

Memory: a packed weight replaces its ``nn.Linear`` weight (the plain tensor is released and rebuilt on demand by
:attr:`PackedLinear.weight` and in ``state_dict``), except where the weight is shared with another module (a tied
lm_head is the input embedding too): that one is kept and the packed copy is extra. For SmolLM2-135M that is the
49152x576 lm_head, +113 MB over a 540 MB model. The remaining tensors are copied out of the memory-mapped weights
file, so the file's pages are released too (see ``benchmarks/fastpath.py`` for the measured resident sizes).

Which linears ``"auto"`` packs depends on the CPU's GEMM library (:func:`cpu_gemm_profile`), measured on both kinds
of machine this project runs on (2 threads, ``benchmarks/fastpath.py`` and the results page):

* AMD (and any CPU where MKL is not tuned): every linear. Prepacked oneDNN beat MKL at every shape: gate/up
  576x3072 for 8 rows 0.7 vs 3.4 ms, the 49152x576 lm_head 6.0 vs 11.8 ms for 1 row.
* Intel with MKL (``"mkl"`` profile): only vocabulary projections (``out_features >= VOCAB_ROWS``). On a 2-core
  Xeon with AVX-512, MKL ran the decoder's small linears 1.5-2.7x faster than the packed kernel for 1 row (the
  whole 1-token step 33 vs 43 ms), while the lm_head was even for 1 row (2.6 vs 2.7 ms) and 2x faster packed
  for 8 rows (4.9 vs 9.9 ms). ``"cpu-packed"`` asked for by name still packs every linear, and
  ``"cpu-packed-vocab"`` asks for the Intel choice on any CPU.

Fallback contract: a model the fast path cannot serve (not on CPU, not float32, oneDNN missing in this torch build,
no plain ``nn.Linear`` projections, e.g. quantized or ``Conv1D`` layers) runs stock with one warning that says why;
linears it cannot pack (subclasses such as quantized linears) are left as they are.
"""

from __future__ import annotations

import os
import platform
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "BACKENDS",
    "Backend",
    "BackendReport",
    "FastPathWarning",
    "Int8Linear",
    "PackedLinear",
    "apply_backend",
    "backend_of",
    "cpu_gemm_profile",
    "pack_linears",
    "packed_copy",
    "resolve_backend",
    "unpack_linears",
]

Backend = Literal["auto", "cpu-packed", "cpu-packed-vocab", "cpu-int8", "stock", "compile"]
BACKENDS: tuple[str, ...] = ("auto", "cpu-packed", "cpu-packed-vocab", "cpu-int8", "stock", "compile")
GQA_ATTENTION = "specdec_sdpa"
COMPILE_MARK = "_specdec_compile"  # set on a model by apply_backend(model, "compile")


class FastPathWarning(UserWarning):
    """The fast path cannot serve (part of) a model; it runs on the stock path instead."""


# ------------------------------------------------------------------------------------------------ packed linears
class PackedLinear(nn.Module):
    """``y = x W^T + b`` with ``W`` reordered once into oneDNN's blocked layout (CPU, float32).

    Shapes: ``x [..., in_features]`` -> ``[..., out_features]``. Inference only: the packed weight is not a
    parameter and gets no gradient.

    Args:
        linear: the ``nn.Linear`` to replace.
        keep_weight: keep ``linear.weight`` as this module's parameter (set when the weight is shared with another
            module); otherwise the plain weight is released and :attr:`weight` rebuilds it on demand.
    """

    def __init__(self, linear: nn.Linear, keep_weight: bool = False) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        w = linear.weight.detach()
        self.packed = torch.ops.mkldnn._reorder_linear_weight(w, 16)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach(), requires_grad=False)
        self._weight = linear.weight if keep_weight else None

    @property
    def weight(self) -> torch.Tensor:
        """The plain ``[out, in]`` weight (the kept parameter, or a fresh dense copy of the packed one)."""
        return self._weight if self._weight is not None else self.packed.to_dense()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)
        if rows.dtype != torch.float32 or rows.device.type != "cpu":
            raise TypeError(f"PackedLinear runs float32 CPU inputs, got {rows.dtype} on {rows.device}")
        y = torch.ops.mkldnn._linear_pointwise(rows, self.packed, self.bias, "none", [], "")
        return y.reshape(*x.shape[:-1], self.out_features)

    def to_linear(self) -> nn.Linear:
        """An ``nn.Linear`` with the same weight and bias (the kept parameter itself when there is one)."""
        lin = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None)
        lin.weight = self._weight if self._weight is not None else nn.Parameter(self.packed.to_dense())
        if self.bias is not None:
            lin.bias = nn.Parameter(self.bias.detach())
        return lin

    def __deepcopy__(self, memo: dict) -> PackedLinear:
        # oneDNN's opaque tensors cannot be deep-copied: copy the plain weight (through ``memo``, so a tied weight
        # stays tied in the copy) and pack the copy again.
        import copy

        linear = copy.deepcopy(self.to_linear(), memo)
        clone = PackedLinear(linear, keep_weight=self._weight is not None)
        for attr in _HOOK_DICTS:
            setattr(clone, attr, copy.deepcopy(getattr(self, attr), memo))
        clone.train(self.training)
        return clone

    def _save_to_state_dict(self, destination, prefix, keep_vars) -> None:
        # The same keys as the nn.Linear it replaced, so saving a packed model writes a loadable checkpoint.
        destination[prefix + "weight"] = self.weight if keep_vars else self.weight.detach()
        if self.bias is not None:
            destination[prefix + "bias"] = self.bias if keep_vars else self.bias.detach()

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Int8Linear(nn.Module):
    """Draft-only: ``y ~ x W^T + b`` with ``W`` quantized once to int8 per output channel (symmetric) and the
    activations quantized per call (fbgemm's dynamic int8 GEMM, ``torch.ops.quantized.linear_dynamic``).

    It *approximates* the linear, so only drafters use it, never a target. Speculative decoding stays lossless
    with any draft: deterministic trees do not use q, and stochastic trees record the q this module produced
    (contract of :class:`~specdec.interfaces.Drafter`: the verifier sees the q the draft was sampled from).
    Shapes: ``x [..., in_features]`` (float32, CPU) -> ``[..., out_features]`` float32.

    Args:
        linear: the ``nn.Linear`` to replace.
        keep_weight: keep its weight reachable as :attr:`weight` (shared, not copied); otherwise it is released and
            :attr:`weight` dequantizes the int8 one on demand (for weights made for this copy, e.g. fused ones).
    """

    def __init__(self, linear: nn.Linear, keep_weight: bool = True) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        w = linear.weight.detach().float()
        scale = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-12).double()
        zero = torch.zeros(w.shape[0], dtype=torch.long)
        bias = None if linear.bias is None else linear.bias.detach().float()
        with warnings.catch_warnings():  # torch marks the quantized-tensor constructors deprecated; they still run
            warnings.simplefilter("ignore")
            qweight = torch.quantize_per_channel(w, scale, zero, 0, torch.qint8)
            self.packed = torch.ops.quantized.linear_prepack(qweight, bias)
        self._weight = linear.weight if keep_weight else None

    @property
    def weight(self) -> torch.Tensor:
        """The float weight ``[out, in]``: the kept one, or the int8 one dequantized."""
        if self._weight is not None:
            return self._weight
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.ops.quantized.linear_unpack(self.packed)[0].dequantize()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)
        y = torch.ops.quantized.linear_dynamic(rows.float(), self.packed, True)  # reduce_range: fbgemm on AVX2
        return y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


def _children(module: nn.Module) -> Iterator[tuple[nn.Module, str, nn.Module]]:
    for parent in module.modules():
        for name, child in parent.named_children():
            yield parent, name, child


_HOOK_DICTS = (
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
)


def _swap(parent: nn.Module, name: str, old: nn.Module, new: nn.Module) -> None:
    """Put ``new`` in ``old``'s place; hooks on ``old`` move along (the same dicts, so their handles still work)."""
    for attr in _HOOK_DICTS:
        setattr(new, attr, getattr(old, attr))
    new.train(old.training)
    setattr(parent, name, new)


def _plain_linear(module: nn.Module) -> bool:
    """An exact ``nn.Linear`` (not a subclass such as a quantized linear) with a float32 CPU weight."""
    return type(module) is nn.Linear and module.weight.dtype == torch.float32 and module.weight.device.type == "cpu"


VOCAB_ROWS = 16384  # a linear with at least this many outputs is a vocabulary projection (lm_head)


def cpu_gemm_profile() -> str:
    """``"mkl"`` on an Intel CPU whose torch uses MKL (fast small-row GEMMs), else ``"onednn"`` (pack everything).

    ``SPECDEC_CPU_GEMM=mkl|onednn`` overrides the detection (e.g. to reproduce one machine's choice on another).
    """
    forced = os.environ.get("SPECDEC_CPU_GEMM", "")
    if forced in ("mkl", "onednn"):
        return forced
    if forced:
        raise ValueError(f"SPECDEC_CPU_GEMM must be 'mkl' or 'onednn', got {forced!r}")
    return "mkl" if torch.backends.mkl.is_available() and _cpu_vendor() == "GenuineIntel" else "onednn"


def _cpu_vendor() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _packing_pays(linear: nn.Linear, profile: str) -> bool:
    """Whether ``"auto"`` packs this linear on a CPU of ``profile`` (see the module docstring)."""
    return profile == "onednn" or linear.out_features >= VOCAB_ROWS


def _shared_weights(module: nn.Module) -> set[int]:
    """ids of parameters owned by more than one module (tied weights)."""
    owners: dict[int, int] = {}
    for sub in module.modules():
        for p in sub.parameters(recurse=False):
            owners[id(p)] = owners.get(id(p), 0) + 1
    return {pid for pid, n in owners.items() if n > 1}


def pack_linears(
    module: nn.Module,
    release: bool = True,
    only: Callable[[nn.Linear], bool] | None = None,
    keep: Callable[[nn.Linear], bool] | None = None,
) -> tuple[int, int]:
    """Swap every plain float32 CPU ``nn.Linear`` under ``module`` for a :class:`PackedLinear`, in place.

    Args:
        module: any module tree.
        release: drop the plain weight of linears whose weight no other module shares (see the module docstring).
        only: pack just the linears this predicate accepts (the others stay as they are and are not counted).
        keep: with ``release``, also keep the plain weight of the linears this predicate accepts.

    Returns:
        ``(packed, skipped)``: linears now packed (including ones packed before), and linear-like modules left
        alone (``nn.Linear`` subclasses such as quantized linears, other dtypes or devices).
    """
    shared = _shared_weights(module)
    packed = skipped = 0
    for parent, name, child in list(_children(module)):
        if isinstance(child, PackedLinear):
            packed += 1  # already packed (idempotent)
            continue
        if _plain_linear(child):
            if only is not None and not only(child):
                continue
            kept = not release or id(child.weight) in shared or (keep is not None and keep(child))
            _swap(parent, name, child, PackedLinear(child, keep_weight=kept))
            packed += 1
        elif isinstance(child, nn.Linear) or type(child).__name__ in ("Conv1D", "Linear8bitLt", "Linear4bit"):
            skipped += 1
    return packed, skipped


def unpack_linears(module: nn.Module) -> int:
    """Swap every :class:`PackedLinear` back for an ``nn.Linear`` (same values); returns how many."""
    count = 0
    for parent, name, child in list(_children(module)):
        if isinstance(child, PackedLinear):
            _swap(parent, name, child, child.to_linear())
            count += 1
    return count


@torch.no_grad()
def _own_memory(module: nn.Module) -> None:
    """Copy every remaining parameter and buffer into the process's own memory.

    ``from_pretrained`` maps the safetensors file and its tensors are views of that mapping. The mapping stays
    resident as long as any one of them lives (the embedding, the norms), even after packing has replaced every
    linear weight. Copying the rest lets the whole mapping go. Measured on SmolLM2: 617 MB of file pages dropped,
    +108 MB anonymous.
    """
    for p in module.parameters():  # deduplicated: a tied weight is copied once and stays tied
        p.data = p.data.clone()
    for sub in module.modules():
        for name, b in sub.named_buffers(recurse=False):
            if b is not None:
                setattr(sub, name, b.clone())


def packed_copy(
    module: nn.Module, int8: bool = False, transform: Callable[[nn.Module], nn.Module] | None = None
) -> nn.Module:
    """A copy of ``module`` whose linears are packed (fp32 oneDNN, or :class:`Int8Linear` with ``int8``) and whose
    other tensors are *shared* with ``module``.

    For modules that keep training or are used elsewhere (a draft head): the original stays untouched; the copy
    costs one packed weight per linear. The copy is a snapshot: later updates to the original's linear weights do
    not reach it.

    Args:
        transform: applied to the copy before packing (e.g. fusing projections,
            :func:`specdec.drafters.eagle_modules.fuse_for_inference`); weights it creates are packed and their
            plain copies released.
    """
    import copy

    memo: dict[int, object] = {}
    for t in [*module.parameters(), *module.buffers()]:
        memo[id(t)] = t
    for sub in module.modules():  # plain tensor attributes (e.g. an attached target embedding) stay shared too
        for value in vars(sub).values():
            if isinstance(value, torch.Tensor):
                memo[id(value)] = value
    shared = set(memo)  # ids of the original's tensors: the copy keeps them; tensors made for the copy are released
    clone = copy.deepcopy(module, memo)
    if transform is not None:
        clone = transform(clone)
    if not int8:
        pack_linears(clone, keep=lambda linear: id(linear.weight) in shared)
        return clone
    for parent, name, child in list(_children(clone)):
        if _plain_linear(child):
            _swap(parent, name, child, Int8Linear(child, keep_weight=id(child.weight) in shared))
    return clone


# ------------------------------------------------------------------------------------------------ GQA attention
def _gqa_sdpa(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers attention function: SDPA with ``enable_gqa`` (keys/values stay ``[B, h_kv, S, d]``).

    Same contract as transformers' ``sdpa`` function for decoder self-attention (``query [B, h, T, d]``, an additive
    or boolean ``attention_mask [B, 1, T, S]`` or None, output ``[B, T, h, d]``); it refuses what it does not
    implement (soft-capping, position biases) instead of ignoring it.
    """
    for unsupported in ("softcap", "position_bias", "s_aux", "sinks"):
        if kwargs.get(unsupported) is not None:
            raise ValueError(f"the {GQA_ATTENTION!r} attention does not support {unsupported}; use attn 'sdpa'")
    t = query.shape[2]
    causal = bool(t > 1 and attention_mask is None and (is_causal if is_causal is not None else module.is_causal))
    if causal and key.shape[2] > t:  # a causal prefill attends over exactly its own t positions
        key, value = key[:, :, :t], value[:, :, :t]
    out = F.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attention_mask,
        dropout_p=dropout,
        scale=scaling,
        is_causal=causal,
        enable_gqa=query.shape[1] != key.shape[1],
    )
    return out.transpose(1, 2).contiguous(), None


def _register_gqa_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    if GQA_ATTENTION not in AttentionInterface._global_mapping:
        AttentionInterface.register(GQA_ATTENTION, _gqa_sdpa)
        AttentionMaskInterface.register(GQA_ATTENTION, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])


def _set_attention(model: nn.Module, name: str) -> bool:
    config = getattr(model, "config", None)
    if config is None or not hasattr(model, "set_attn_implementation"):
        return False
    model.set_attn_implementation(name)
    return config._attn_implementation == name


def _use_gqa_attention(model: nn.Module) -> str:
    """Switch an ``sdpa`` model to the copy-free GQA attention; returns the attention implementation now in force."""
    attention = getattr(getattr(model, "config", None), "_attn_implementation", "") or ""
    if attention in ("sdpa", GQA_ATTENTION):
        _register_gqa_attention()
        attention = GQA_ATTENTION if _set_attention(model, GQA_ATTENTION) else attention
    return attention


# ------------------------------------------------------------------------------------------------ the switch
@dataclass(frozen=True)
class BackendReport:
    """What :func:`apply_backend` did.

    Attributes:
        backend: the backend now in force (``"cpu-packed"`` or ``"stock"``).
        packed: linears packed; skipped: linear-like modules left stock; attention: the attention implementation.
        reason: why the requested fast path was not (fully) applied, or ``""``.
    """

    backend: str
    packed: int = 0
    skipped: int = 0
    attention: str = ""
    reason: str = ""


def _params(model: nn.Module) -> tuple[torch.device | None, torch.dtype | None]:
    for p in model.parameters():
        return p.device, p.dtype
    return None, None


def resolve_backend(model: nn.Module, backend: str = "auto", draft: bool = False) -> tuple[str, str]:
    """``(backend, reason)`` for ``model``: what ``backend`` becomes where it can (or cannot) serve the model.

    ``"auto"`` becomes ``"cpu-packed"`` for a target and ``"cpu-int8"`` for a draft model (``draft=True``) where
    they apply, else ``"stock"``. ``"cpu-int8"`` approximates the weights: a target asking for it is refused
    (``ValueError``), since a target must run exactly. A fast backend that cannot serve the model resolves to
    ``"stock"`` with the reason (the caller warns). Raises ``ValueError`` for an unknown name.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
    if backend == "cpu-int8" and not draft:
        raise ValueError("backend 'cpu-int8' approximates the weights and is for drafters only; a target runs exactly")
    if backend == "compile":
        if not draft:
            return "compile", ""
        backend = "auto"  # a drafter without static steps of its own (EAGLE's handle "compile" themselves)
    if backend == "stock":
        return "stock", ""
    device, dtype = _params(model)
    if device is None or device.type != "cpu":
        return "stock", f"the model is on {device}, the packed path is CPU-only"
    if dtype != torch.float32:
        return "stock", f"the model is {dtype}; the packed path needs float32 (no bf16 GEMM on this CPU's ISA)"
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")):
        return "stock", "this torch build has no oneDNN (mkldnn) linear kernels"
    if draft and backend in ("auto", "cpu-int8"):
        if hasattr(torch.ops.quantized, "linear_dynamic") and "fbgemm" in torch.backends.quantized.supported_engines:
            return "cpu-int8", ""
        if backend == "cpu-int8":
            return "cpu-packed", "this torch build has no fbgemm dynamic int8 linear"
    return "cpu-packed", ""


def backend_of(model: nn.Module) -> str:
    """The backend a model currently runs: ``"compile"`` if :func:`apply_backend` put it there last,
    ``"cpu-packed"`` if its linears are packed, ``"cpu-packed-vocab"`` if only some are (``"auto"`` on an Intel CPU
    with MKL: the vocabulary projections), else ``"stock"``."""
    if getattr(model, COMPILE_MARK, False):
        return "compile"
    modules = list(model.modules())
    if not any(isinstance(m, PackedLinear) for m in modules):
        return "stock"
    return "cpu-packed-vocab" if any(_plain_linear(m) for m in modules) else "cpu-packed"


def apply_backend(model: nn.Module, backend: str = "auto", warn: bool = True) -> BackendReport:
    """Put ``model`` on ``backend`` in place (pack or unpack its linears, switch its attention function).

    The model is shared by everything that holds it (a target and a drafter cut from its layers run the same
    modules), so this is a property of the model, not of the caller. Idempotent.

    Args:
        model: a Hugging Face model or any ``nn.Module`` (heads, small LMs).
        backend: ``"auto"`` (``"cpu-packed"`` where it can serve the model), ``"cpu-packed"`` or ``"stock"``.
        warn: emit one :class:`FastPathWarning` when a requested fast path falls back.
    """
    requested = backend
    backend, reason = resolve_backend(model, backend)
    setattr(model, COMPILE_MARK, backend == "compile")  # plain modules cannot tell this backend from stock
    if backend == "compile":  # plain linears for inductor, GQA attention without copies
        unpack_linears(model)
        return BackendReport("compile", attention=_use_gqa_attention(model))
    if backend == "stock":
        unpack_linears(model)
        if getattr(getattr(model, "config", None), "_attn_implementation", None) == GQA_ATTENTION:
            _set_attention(model, "sdpa")
        if reason and warn and requested != "stock":
            warnings.warn(f"fast path off, running stock: {reason}", FastPathWarning, stacklevel=2)
        return BackendReport("stock", reason=reason)
    try:
        already = backend_of(model) != "stock"
        profile = {"auto": cpu_gemm_profile(), "cpu-packed-vocab": "mkl"}.get(requested, "onednn")
        packed, skipped = pack_linears(model, only=lambda lin: _packing_pays(lin, profile))
        if packed and not already:
            _own_memory(model)
    except RuntimeError as e:  # an op missing or failing in this torch build: undo and run stock
        unpack_linears(model)
        reason = f"oneDNN weight packing failed ({e})"
        if warn:
            warnings.warn(f"fast path off, running stock: {reason}", FastPathWarning, stacklevel=2)
        return BackendReport("stock", reason=reason)
    attention = _use_gqa_attention(model)
    if skipped and warn:
        reason = f"{skipped} projection(s) are not plain nn.Linear (quantized or Conv1D) and run stock"
        warnings.warn(f"fast path partial: {reason}", FastPathWarning, stacklevel=2)
    if not packed and profile == "mkl" and any(_plain_linear(m) for m in model.modules()):
        # a choice, not a fallback: on this CPU MKL runs these linears faster than the packed kernel
        if attention == GQA_ATTENTION:
            _set_attention(model, "sdpa")
        return BackendReport("stock", reason="MKL on this Intel CPU runs every linear of this model faster unpacked")
    if not packed:
        reason = reason or "the model has no plain nn.Linear projections"
        if warn:
            warnings.warn(f"fast path off, running stock: {reason}", FastPathWarning, stacklevel=2)
        return BackendReport("stock", 0, skipped, attention, reason)
    return BackendReport(backend_of(model), packed, skipped, attention, reason)
