"""Weight kernels for the CPU: linears prepacked for oneDNN (exact; float32 or bfloat16) and int8 linears (drafts only).

Both are module swaps on a model, never a second forward: :func:`pack_linears` puts :class:`PackedLinear` in place of
plain ``nn.Linear`` s; :func:`packed_copy` makes a copy of a draft head whose linears are packed or int8 while every
other tensor stays shared; :func:`shared_copy` makes a copy that shares every tensor, so a transformation of the copy
never reaches the original (:func:`specdec.backends.prepare_model`).

Why prepacking (measured on the 2-core AMD EPYC, 2 threads, see ``benchmarks/fastpath.py`` and the results page):
MKL's ``sgemm`` runs small-row GEMMs (1-32 rows, the shape of a draft tree) at a fraction of the bandwidth and packs
the weight on every call; the prepacked oneDNN kernel runs them near the cost of one row.

Which linears ``weights="auto"`` packs depends on the CPU's GEMM library
(:func:`~specdec.backends.cpu.cpu_gemm_profile`), measured on both kinds of machine this project runs on (2 threads,
``benchmarks/fastpath.py`` and the results page):

* AMD (and any CPU where MKL is not tuned): every linear. Prepacked oneDNN beat MKL at every shape: gate/up
  576x3072 for 8 rows 0.7 vs 3.4 ms, the 49152x576 lm_head 6.0 vs 11.8 ms for 1 row.
* Intel with MKL (``"mkl"`` profile): only vocabulary projections (``out_features >= VOCAB_ROWS``). On a 2-core
  Xeon with AVX-512, MKL ran the decoder's small linears 1.5-2.7x faster than the packed kernel for 1 row (the
  whole 1-token step 33 vs 43 ms), while the lm_head was even for 1 row (2.6 vs 2.7 ms) and 2x faster packed
  for 8 rows (4.9 vs 9.9 ms). ``weights="packed"`` asked for by name packs every linear on any CPU.

Memory: a packed weight replaces its ``nn.Linear`` weight where the model is transformed in place (the plain tensor
is released and rebuilt on demand by :attr:`PackedLinear.weight` and in ``state_dict``), except where the weight is
shared with another module (a tied lm_head is the input embedding too): that one is kept and the packed copy is
extra. On a copy that shares the caller's weights, every packed weight is extra while the caller holds its model.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from specdec.backends.cpu import PACKED_DTYPES

__all__ = [
    "each_child",
    "FastPathWarning",
    "Int8Linear",
    "PackedLinear",
    "VOCAB_ROWS",
    "pack_linears",
    "own_memory",
    "packed_copy",
    "packing_pays",
    "plain_linear",
    "return_freed_memory",
    "packed_linear",
    "runs_packed",
    "shared_copy",
    "swap_module",
    "unpack_linears",
]


class FastPathWarning(UserWarning):
    """The fast path cannot serve (part of) a model; it runs on the stock path instead."""


# ------------------------------------------------------------------------------------------------ packed linears
class PackedLinear(nn.Module):
    """``y = x W^T + b`` with ``W`` reordered once into oneDNN's blocked layout (CPU, float32 or bfloat16).

    Shapes: ``x [..., in_features]`` -> ``[..., out_features]``, in the weight's dtype (a bfloat16 linear
    accumulates in float32 and rounds its output to bfloat16, as the stock bfloat16 GEMM does). Inference only: the
    packed weight is not a parameter and gets no gradient.

    Row invariance (``pad_single_row``, :func:`~specdec.backends.row_probe.set_row_padding`): for some shapes oneDNN
    runs one row through a GEMV kernel whose float32 sums are grouped differently from its GEMM kernel for 2 or more
    rows, so a row's output can differ in the last bit between a 1-token step and a tree forward (in bfloat16 that is a
    whole bfloat16 ulp, often enough to change a greedy token). Padded to two rows, a single row runs the GEMM kernel
    too. Where GEMMs of many rows take another kernel (``row_block``: bfloat16 above 32 rows on an Intel Xeon with
    AMX), they run in blocks of that many rows. Which shapes need either is probed on the running CPU
    (:func:`~specdec.backends.row_probe.row_invariance`).

    Args:
        linear: the ``nn.Linear`` to replace.
        keep_weight: keep ``linear.weight`` as this module's parameter (set when the weight is shared with another
            module); otherwise the plain weight is released and :attr:`weight` rebuilds it on demand.
    """

    def __init__(self, linear: nn.Linear, keep_weight: bool = False) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        w = linear.weight.detach()
        if w.dtype not in PACKED_DTYPES:
            raise TypeError(f"PackedLinear packs {' or '.join(map(str, PACKED_DTYPES))} weights, got {w.dtype}")
        self.dtype = w.dtype
        self.packed = torch.ops.mkldnn._reorder_linear_weight(w, 16)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach(), requires_grad=False)
        self._weight = linear.weight if keep_weight else None
        self.pad_single_row = False  # row-invariant numerics (set_row_padding)
        #: The plain ``[out, in]`` weight a single row runs on :attr:`single_row_kernel` (:meth:`single_rows`), or
        #: None (a single row runs packed).
        self.single_row_weight: torch.Tensor | None = None
        #: ``"stock"`` (``F.linear``) or ``"skinny"`` (``specdec::skinny_linear``) where :attr:`single_row_weight`
        #: is set.
        self.single_row_kernel: str | None = None
        #: Fewer rows than this run padded with zero rows to this many (measured faster on the CPU at hand:
        #: :mod:`specdec.backends.row_padding`); 1: every row count runs as it comes.
        self.pad_rows = 1
        #: GEMMs of more rows than this run block by block (row-invariant numerics, where the kernel groups sums
        #: otherwise above it: :func:`~specdec.backends.row_probe.row_invariance`); None: one GEMM, any size.
        self.row_block: int | None = None

    @property
    def weight(self) -> torch.Tensor:
        """The plain ``[out, in]`` weight (the kept parameter, or a fresh dense copy of the packed one)."""
        return self._weight if self._weight is not None else self.packed.to_dense()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != self.dtype or not x.is_cpu:
            raise TypeError(f"this PackedLinear runs {self.dtype} CPU inputs, got {x.dtype} on {x.device}")
        if x.shape[-1] != self.in_features:
            raise ValueError(f"this PackedLinear takes [..., {self.in_features}] inputs, got {list(x.shape)}")
        if x.numel() == self.in_features:  # one row
            if self.pad_single_row:  # oneDNN's GEMV kernel groups sums otherwise: pad it to two rows
                return self.gemm(x.reshape(1, -1).expand(2, -1))[:1].reshape(*x.shape[:-1], self.out_features)
            if self.single_row_kernel == "skinny":  # measured faster here (AMD Zen 4: oneDNN's one row is slow)
                return torch.ops.specdec.skinny_linear(x, self.single_row_weight, self.bias)
            if self.single_row_weight is not None:  # measured faster stock here (MKL's GEMV on an Intel Xeon)
                return F.linear(x, self.single_row_weight, self.bias)
        rows = x.numel() // self.in_features
        if 0 < rows < self.pad_rows:  # measured faster padded here (AMD Zen 4: oneDNN runs 6 rows faster than 1)
            flat = x.reshape(rows, self.in_features)
            y = self.gemm(torch.cat((flat, flat.new_zeros(self.pad_rows - rows, self.in_features))))
            return y[:rows].reshape(*x.shape[:-1], self.out_features)
        if self.row_block is not None and rows > self.row_block:  # the kernel of many rows groups sums otherwise
            y = self.blocked_gemm(x.reshape(rows, self.in_features), self.row_block)
            return y.reshape(*x.shape[:-1], self.out_features)
        return self.gemm(x)

    def single_rows(self, kernel: str | None) -> int:
        """Run a single row (a 1-token step) on ``kernel`` over a plain copy of the weight, every other row count
        packed: ``"stock"`` (``F.linear``), ``"skinny"`` (``specdec::skinny_linear``, float32, once
        :func:`specdec.backends.skinny.load` has loaded it) or None (packed, the copy released); returns the bytes
        this keeps beside the packed weight (0 for a kept, tied weight).

        Every kernel gives a row the same values up to the grouping of its sums, so a 1-token step and a tree
        forward may differ in the last bits (as stock and packed do): not with row-invariant numerics
        (:attr:`pad_single_row` and this exclude each other)."""
        if kernel not in (None, "stock", "skinny"):
            raise ValueError(f"a single row runs packed (None), 'stock' or 'skinny', not {kernel!r}")
        if kernel is not None and self.pad_single_row:
            raise ValueError(f"a single row runs padded (row-invariant numerics) or {kernel}, not both")
        if kernel == "skinny":
            if self.dtype != torch.float32:
                raise ValueError(f"the skinny kernel runs float32, this PackedLinear {self.dtype}")
            if not hasattr(torch.ops.specdec, "skinny_linear"):
                raise RuntimeError("specdec::skinny_linear is not loaded: call specdec.backends.skinny.load() first")
        self.single_row_kernel = kernel
        if kernel is None:
            self.single_row_weight = None
            return 0
        if self.single_row_weight is None:
            self.single_row_weight = self.weight.detach() if self._weight is not None else self.packed.to_dense()
        return 0 if self._weight is not None else self.single_row_weight.nbytes  # a kept weight is shared, not copied

    def gemm(self, x: torch.Tensor) -> torch.Tensor:
        """The packed GEMM on ``x [..., in_features]`` as it is (no row padding, no checks)."""
        # one op: the kernel flattens [..., in_features] to rows and gives the output back in x's leading shape
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")

    def blocked_gemm(self, x: torch.Tensor, block: int | None) -> torch.Tensor:
        """The packed GEMM on ``x [rows, in_features]`` in blocks of at most ``block`` rows (None: one GEMM), as
        even as they divide (17 rows in blocks of 16 run as 9 and 8): no block is a single row, which some kernels
        run otherwise (oneDNN's GEMV)."""
        if block is None or x.shape[0] <= block:
            return self.gemm(x)
        return torch.cat([self.gemm(part) for part in x.tensor_split(-(-x.shape[0] // block))])

    def to_linear(self) -> nn.Linear:
        """An ``nn.Linear`` with the same weight and bias (the kept parameter itself when there is one)."""
        lin = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None, dtype=self.dtype)
        lin.weight = self._weight if self._weight is not None else nn.Parameter(self.packed.to_dense())
        if self.bias is not None:
            lin.bias = nn.Parameter(self.bias.detach())
        return lin

    def __deepcopy__(self, memo: dict) -> PackedLinear:
        # oneDNN's opaque tensors cannot be deep-copied: copy the plain weight (through ``memo``, so a tied weight
        # stays tied in the copy) and pack the copy again.
        linear = copy.deepcopy(self.to_linear(), memo)
        clone = PackedLinear(linear, keep_weight=self._weight is not None)
        clone.pad_single_row = self.pad_single_row
        clone.single_rows(self.single_row_kernel)
        clone.pad_rows, clone.row_block = self.pad_rows, self.row_block
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
    Shapes: ``x [..., in_features]`` (float32 or bfloat16, CPU) -> ``[..., out_features]`` in ``x``'s dtype (the GEMM
    itself runs on float32 activations).

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
        return y.reshape(*x.shape[:-1], self.out_features).to(x.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


def each_child(module: nn.Module) -> Iterator[tuple[nn.Module, str, nn.Module]]:
    """``(parent, name, child)`` for every direct child of every module under ``module`` (list it before swapping)."""
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


def swap_module(parent: nn.Module, name: str, old: nn.Module, new: nn.Module) -> None:
    """Put ``new`` in ``old``'s place; hooks on ``old`` move along (the same dicts, so their handles still work)."""
    for attr in _HOOK_DICTS:
        setattr(new, attr, getattr(old, attr))
    new.train(old.training)
    setattr(parent, name, new)


def runs_packed(module: nn.Module) -> bool:
    """A :class:`PackedLinear`, or a module that runs rows of one (a member of a stacked group,
    :class:`~specdec.backends.stacking.StackedSlice`): counted, padded and undone with the packed linears."""
    return isinstance(module, PackedLinear) or getattr(type(module), "packed_member", False)


def plain_linear(module: nn.Module) -> bool:
    """An exact ``nn.Linear`` (not a subclass such as a quantized linear) with a float32 or bfloat16 CPU weight."""
    return type(module) is nn.Linear and module.weight.dtype in PACKED_DTYPES and module.weight.device.type == "cpu"


VOCAB_ROWS = 16384  # a linear with at least this many outputs is a vocabulary projection (lm_head)


def packing_pays(linear: nn.Linear, profile: str) -> bool:
    """Whether ``"auto"`` packs this linear on a CPU of ``profile`` (see the module docstring).

    bfloat16: every linear where measured (AMD Zen 4 with avx512_bf16, where the stock bfloat16 GEMM is oneDNN
    reordering the weight on every call); none on an Intel CPU until it is measured there (``weights="packed"`` packs
    them by name, ``benchmarks/fastpath.py --dtype bfloat16`` prints both).
    """
    if linear.weight.dtype == torch.bfloat16:
        return profile == "onednn"
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
    """Swap every plain float32 or bfloat16 CPU ``nn.Linear`` under ``module`` for a :class:`PackedLinear`, in place.

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
    for parent, name, child in list(each_child(module)):
        if runs_packed(child):
            packed += 1  # already packed (idempotent)
            continue
        if plain_linear(child):
            if only is not None and not only(child):
                continue
            kept = not release or id(child.weight) in shared or (keep is not None and keep(child))
            swap_module(parent, name, child, PackedLinear(child, keep_weight=kept))
            packed += 1
        elif isinstance(child, nn.Linear) or type(child).__name__ in ("Conv1D", "Linear8bitLt", "Linear4bit"):
            skipped += 1
    return packed, skipped


def packed_linear(module: nn.Module) -> PackedLinear:
    """The :class:`PackedLinear` a module of :func:`runs_packed` runs rows of (itself, or its stacked group's)."""
    return module if isinstance(module, PackedLinear) else module.stack.linear


def unpack_linears(module: nn.Module) -> int:
    """Swap every :class:`PackedLinear` (and member of a stacked group) back for an ``nn.Linear`` (same values, hooks
    moved); returns how many."""
    count = 0
    for parent, name, child in list(each_child(module)):
        if runs_packed(child):
            swap_module(parent, name, child, child.to_linear())
            count += 1
    return count


def return_freed_memory() -> bool:
    """Give the pages of freed tensors back to the operating system (glibc ``malloc_trim``); False where unavailable.

    Tensors of a few MB come from malloc's heap once its mmap threshold has grown, and freeing them leaves their
    pages resident. After packing a bfloat16 model in place (its plain weights were converted from the file, so
    they live on that heap) this took the process from 909 to 710 MB (SmolLM2, AMD Zen 4).
    """
    try:
        import ctypes

        return bool(ctypes.CDLL("libc.so.6").malloc_trim(0))
    except (OSError, AttributeError):
        return False


@torch.no_grad()
def own_memory(module: nn.Module) -> None:
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


def _own_tensors(module: nn.Module) -> list[torch.Tensor]:
    """Every tensor ``module`` holds: parameters, buffers and plain tensor attributes (e.g. an attached embedding)."""
    tensors = [*module.parameters(), *module.buffers()]
    for sub in module.modules():
        tensors += [value for value in vars(sub).values() if isinstance(value, torch.Tensor)]
    return tensors


def shared_copy(module: nn.Module) -> nn.Module:
    """A copy of ``module`` that shares every tensor with it (parameters, buffers, plain tensor attributes): a new
    module tree and new Python attributes (a model's config too), the same weights.

    Swapping the copy's submodules, setting its attention implementation or its training flag leaves ``module`` as it
    was; writing into a shared tensor in place would not (nothing here does).
    """
    memo: dict[int, object] = {id(t): t for t in _own_tensors(module)}
    return copy.deepcopy(module, memo)


def packed_copy(
    module: nn.Module,
    int8: bool = False,
    transform: Callable[[nn.Module], nn.Module] | None = None,
    int8_linear: Callable[..., nn.Module] = Int8Linear,
) -> nn.Module:
    """A copy of ``module`` whose linears are packed (fp32 oneDNN, or int8 with ``int8``: ``int8_linear(linear,
    keep_weight=...)`` each, :class:`Int8Linear` by default) and whose other tensors are *shared* with ``module``
    (:func:`shared_copy`).

    For modules that keep training or are used elsewhere (a draft head): the original stays untouched; the copy
    costs one packed weight per linear. The copy is a snapshot: later updates to the original's linear weights do
    not reach it.

    Args:
        transform: applied to the copy before packing (e.g. fusing projections for inference); weights it creates
            are packed and their plain copies released.
    """
    shared = {id(t) for t in _own_tensors(module)}  # the original's: kept by the copy; tensors made for it are released
    clone = shared_copy(module)
    if transform is not None:
        clone = transform(clone)
    if not int8:
        pack_linears(clone, keep=lambda linear: id(linear.weight) in shared)
        return clone
    for parent, name, child in list(each_child(clone)):
        if plain_linear(child):
            swap_module(parent, name, child, int8_linear(child, keep_weight=id(child.weight) in shared))
    return clone
