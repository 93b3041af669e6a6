"""Row invariance of the packed kernels, probed on the CPU at hand: does a row get the same bits from a packed GEMM
whatever the number of rows it runs with (a 1-token step against a tree forward)? Where a single row takes another
kernel (oneDNN's GEMV), padding it to two rows restores the bits; where GEMMs of many rows take another kernel
(oneDNN's bfloat16 GEMM on an Intel Xeon with AMX switches above 32 rows), running them in blocks of at most
:data:`ROW_BLOCKS` rows does; where rows differ between GEMMs of two row counts within a block, row-invariant numerics
cannot be served (:class:`RowVariantKernelError`)."""

from __future__ import annotations

import torch
from torch import nn

from specdec.backends.kernels import PackedLinear, packed_linear, return_freed_memory, runs_packed

__all__ = [
    "PROBE_ROWS",
    "ROW_BLOCKS",
    "RowVariantKernelError",
    "row_invariance",
    "set_row_padding",
    "single_row_padding",
]


class RowVariantKernelError(RuntimeError):
    """A packed GEMM gives a row other bits depending on how many rows run with it, even with single rows padded:
    row-invariant numerics cannot be served by this CPU's kernel for that shape."""


#: Row counts the probe of :func:`row_invariance` runs (trees run 2 to a few dozen rows; 17 puts a row in oneDNN's
#: tail block after a full block of 16, and in blocks of 16 runs as 9 and 8). Each count leaves oneDNN buffers
#: behind, ~25 MB for SmolLM2's five shapes (AMD Zen 4), as trees of those sizes would.
PROBE_ROWS = (2, 3, 8, 17, 64)
#: Block sizes tried, largest first, where GEMMs of more rows group their sums otherwise than GEMMs of fewer: a GEMM
#: of more rows than the block then runs block by block (:attr:`PackedLinear.row_block`). 32: oneDNN's bfloat16 GEMM
#: on an Intel Xeon with AMX (family 6 model 207) gives rows other bits from 33 rows on, the same bits up to 32.
ROW_BLOCKS = (32, 16)
_PROBED: dict[tuple, tuple[bool, int | None]] = {}


def _order_sensitive(generator: torch.Generator, rows: int, outs: int, ins: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows ``[rows, ins]`` and a weight ``[outs, ins]`` whose products make a GEMM's result depend on how it groups
    its sums: entries +-1, except at up to 8 random inputs where the rows hold 4096 and each weight row +-4096 (half of
    each sign), so every output is a sum of +-1 terms around big products (+-2^24) that cancel exactly. A float32
    partial sum holding a net big product rounds the +-1 terms added to it, so another grouping gives another small
    result, visible after rounding to bfloat16 too. Exact in bfloat16."""
    big = torch.randperm(ins, generator=generator)[: min(8, ins) // 2 * 2]
    x = torch.randint(0, 2, (rows, ins), generator=generator) * 2.0 - 1.0
    x[:, big] = 4096.0
    block = min(outs, 256)  # the weight's values are free: a block tiled over the outputs
    w = torch.randint(0, 2, (block, ins), generator=generator) * 2.0 - 1.0
    signs = torch.tensor([4096.0, -4096.0]).repeat_interleave(big.numel() // 2)
    w[:, big] = torch.stack([signs[torch.randperm(signs.numel(), generator=generator)] for _ in range(block)])
    return x, w.repeat(-(-outs // block), 1)[:outs]


def single_row_padding(linear: PackedLinear) -> bool:
    """Whether a single row must be padded to two for ``linear`` to give it the bits it gets among more rows
    (:func:`row_invariance`, probed once per shape)."""
    return row_invariance(linear)[0]


@torch.no_grad()
def row_invariance(linear: PackedLinear) -> tuple[bool, int | None]:
    """How ``linear``'s packed GEMM gives every row the same bits whatever the number of rows it runs with: whether a
    single row is padded to two, and the block of rows GEMMs of more rows run in (None: one GEMM, any size).

    Probed once per shape, dtype and thread count on the running CPU: the grouping of a GEMM's sums depends on the
    kernel oneDNN picks for those, not on the weight's values. The probe packs a weight of the same shape and runs
    64 rows as one GEMM, then as GEMMs of every count in :data:`PROBE_ROWS` and as single rows (8 of them, at block
    edges), comparing each result bit for bit with the same rows of the 64-row GEMM; where a count differs, the same
    again with every GEMM in blocks of each size in :data:`ROW_BLOCKS` (the 64 rows too,
    :meth:`PackedLinear.blocked_gemm`). Its rows and weight are order-sensitive (:func:`_order_sensitive`): with
    random normal values another grouping moves a float32 sum by an ulp, which rounding to bfloat16 hides in all but
    ~1 in 10^4 outputs, so such a probe passed a bfloat16 kernel that changed real tokens. With these values 92 % of
    that kernel's single-row outputs differ, in bfloat16 and in float32, and 98 % of a sum taken in reverse order.

    Returns:
        ``(pad, block)``: ``pad`` False where single rows already match (SmolLM2's 576-input linears on AMD Zen 4,
        both dtypes), True where they match once padded to two (its 1,536-input down projection there, both dtypes);
        ``block`` None where GEMMs of every count agree, 32 for bfloat16 on an Intel Xeon with AMX.

    Raises:
        RowVariantKernelError: the rows differ between GEMMs of two counts of rows, in blocks too, or single rows
            differ padded too.
    """
    key = (linear.in_features, linear.out_features, linear.dtype, linear.bias is not None, torch.get_num_threads())
    if key not in _PROBED:
        g = torch.Generator().manual_seed(0)
        x, weight = _order_sensitive(g, max(PROBE_ROWS), linear.out_features, linear.in_features)
        probe = nn.Linear(linear.in_features, linear.out_features, bias=linear.bias is not None, dtype=linear.dtype)
        probe.weight.data = weight.to(linear.dtype)
        if probe.bias is not None:
            probe.bias.data.zero_()
        probe, x = PackedLinear(probe), x.to(linear.dtype)
        shape = f"{linear.dtype} {linear.in_features}->{linear.out_features}"
        failed = []
        for block in (None, *ROW_BLOCKS):
            full = probe.blocked_gemm(x, block)
            m = next((m for m in PROBE_ROWS[:-1] if not torch.equal(probe.blocked_gemm(x[:m], block), full[:m])), None)
            if m is None:
                break
            failed.append(f"for {m} rows than for more" if block is None else f"in blocks of {block} rows, for {m}")
        else:
            raise RowVariantKernelError(f"the packed {shape} GEMM gives other bits {'; '.join(failed)}")
        rows = (0, 1, 2, 15, 16, 31, 32, 63)
        if all(torch.equal(probe.gemm(x[i : i + 1]), full[i : i + 1]) for i in rows):
            _PROBED[key] = (False, block)
        elif all(torch.equal(probe.gemm(x[i : i + 1].expand(2, -1))[:1], full[i : i + 1]) for i in rows):
            _PROBED[key] = (True, block)
        else:
            raise RowVariantKernelError(f"the packed {shape} GEMM gives a single row other bits, padded or not")
    return _PROBED[key]


def set_row_padding(module: nn.Module, on: bool) -> int:
    """Set :attr:`PackedLinear.pad_single_row` and :attr:`PackedLinear.row_block` on every packed linear under
    ``module`` (the first also on every module that forwards it to one:
    :class:`~specdec.backends.stacking.StackedSlice`): with ``on``, as the probe of :func:`row_invariance` says each
    needs; off, unpadded and unblocked; returns how many pad. The probe runs with the thread count in force now: a
    target built with one thread count and run with another is probed for the first (the fast-path benchmarks and the
    CLI set the count before building).

    Raises:
        RowVariantKernelError: with ``on``, a linear whose kernel is not row-invariant (none is changed then).
    """
    packed = [sub for sub in module.modules() if runs_packed(sub)]
    probed = len(_PROBED)
    ways = [row_invariance(packed_linear(sub)) if on else (False, None) for sub in packed]  # probe all first
    if len(_PROBED) > probed:
        return_freed_memory()  # a probe's weight can be as large as the model's lm_head: hand its pages back
    for sub, (pad, block) in zip(packed, ways, strict=True):
        sub.pad_single_row = pad
        packed_linear(sub).row_block = block
    return sum(pad for pad, _ in ways)
