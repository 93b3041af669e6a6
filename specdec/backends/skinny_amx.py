"""The coded kernel's AMX form (``specdec::skinny_linear_amx``, ``skinny_amx.cpp``): a GGUF target's exact block codes
multiplied on the tile unit of a CPU with AMX, so a tree's rows cost less than on FMA (16 rows 2.2-3.3x one row
per SmolLM2 shape, warm, against the AVX-512 coded kernel's 3.7-6.2x).

Measured on the Intel Xeon of family 6 model 207 (2 threads, one process, docs/results/2026-12-01-amx-intel-f6m207):
against the AVX-512 coded kernel, SmolLM2's linears about even for one row (the 49152 x 576 vocabulary projection,
Q8_0 codes, 1.3x slower), 1.2-1.5x faster for 8 rows and 1.5-2.3x for 16. End to end, one process each: in
SmolLM2's package (the package table put 30 linears on it) Spec-Bench 30 x 96 at T = 0 ran plain decoding 1.01x,
EAGLE-3 1.05x and the composite 1.06x their speed without it, greedy 30/30; on eager shapes (the eager table put 151
linears on it) Spec-Bench 12 x 96 ran plain decoding 0.98x and the composite 0.98x (adaptive trees of 5 nodes, where
the rest of an eager forward outweighs the linears' gain). So the candidates ``amx`` (codes in 0..31, converted by
one table lookup) and ``amx8`` (other codes) are timed in a package's table by default and in the eager table where
``SPECDEC_AMX=auto`` asks (:func:`amx_timed`; ``off``: neither). A third candidate, ``amx4``, holds Q4_1 codes as
the file does, two a byte with float16 scales and offsets (0.625 bytes a weight against 1.25; bitwise the same
outputs as the byte form): SmolLM2's package ran a 1-token forward in 0.84x the byte form's time and plain decoding
1.11x faster on Spec-Bench 30 x 96 (docs/results/2026-12-01-amx4-intel-f6m207; ``SPECDEC_AMX4=off`` keeps the bytes).

Exactness (``skinny_amx.cpp`` states it in full): the products are exact (a float32 input is three bfloat16 parts,
a code is a bfloat16), the sums are float32, and the weight multiplied is its exact GGUF value ``d * q + m``, of which
the float32 weight is the rounding; the output differs from ``x @ w.T`` by float32 rounding only. A row's output is
bitwise the same alone or among any rows (row invariance), but not the AVX-512 kernels' bits: a linear runs on one
form for every row count.
"""

from __future__ import annotations

import functools
import os

import torch

from specdec.backends.cpu import cpu_flags
from specdec.backends.skinny_codes import QBLOCK, Codes

__all__ = [
    "AMX_KERNELS",
    "LAYOUTS",
    "PAIR",
    "amx_form",
    "amx_layout",
    "amx_timed",
    "amx_synthetic",
    "amx_unavailable",
]

#: The AMX candidates: 4-bit codes with float16 scales and offsets (``amx4``: Q4_1 as the file stores it, two codes a
#: byte, 0.625 bytes a weight), codes in 0..31 (``amx``: Q5_1, one byte each; both by one table lookup a code) and any
#: int8 codes (``amx8``: Q8_0, Q4_0, Q5_0).
AMX_KERNELS = ("amx4", "amx", "amx8")
#: Output tiles of 16 per pass over the inputs (``skinny_amx.cpp``'s ``PAIR``): the codes' layout groups them.
PAIR = 2
#: Each form's layout of its codes (:func:`amx_layout`), in the names of packages holding it as constants: bumped
#: when it changes.
LAYOUTS = {"amx4": "amx4n1", "amx": "amx1", "amx8": "amx1"}
#: The CPU flags the kernel needs (Linux's names in /proc/cpuinfo).
FLAGS = frozenset({"amx_tile", "amx_bf16", "avx512_bf16", "avx512bw"})


def amx_timed(package: bool) -> bool:
    """Whether the AMX forms are timed as candidates for a package's linears (``package``) or eager shapes'.
    ``SPECDEC_AMX``: ``package`` (the default) for packages only, ``auto`` for both, ``off`` for neither. Measured on
    the one AMX CPU met (the module's docstring): a package gained from it, eager shapes did not.

    Raises:
        ValueError: ``SPECDEC_AMX`` is none of those.
    """
    switch = os.environ.get("SPECDEC_AMX", "package").lower()
    if switch not in ("auto", "package", "off"):
        raise ValueError(f"SPECDEC_AMX must be 'auto', 'package' or 'off', got {switch!r}")
    return switch == "auto" or (switch == "package" and package)


@functools.cache
def amx_unavailable() -> str | None:
    """Why the AMX form cannot run here, or None when it can (loads the kernel library; the OS is asked once for
    the tile state)."""
    missing = sorted(FLAGS - cpu_flags())
    if missing:
        return f"this CPU lacks {', '.join(missing)}"
    from specdec.backends import skinny

    if (why := skinny.unavailable()) is not None:
        return why
    if not torch.ops.specdec.amx_ready():
        return "the OS refused the AMX tile state, or the kernel library was built by a compiler without AMX"
    return None


def _float16_exact(t: torch.Tensor) -> bool:
    """Whether every value of the float32 ``t`` is a float16 (the same bits after a round trip)."""
    return torch.equal(t.half().float().view(torch.int32), t.view(torch.int32))


def _narrowest(codes: Codes) -> str:
    """The narrowest AMX form that holds ``codes`` (of :data:`AMX_KERNELS`, whatever ``SPECDEC_AMX4`` says)."""
    low, high = int(codes.q.min()), int(codes.q.max())
    if low >= 0 and high < 16 and _float16_exact(codes.d) and _float16_exact(codes.m):
        return "amx4"
    return "amx" if low >= 0 and high < 32 else "amx8"


def amx_form(codes: Codes) -> str:
    """The AMX candidate that serves ``codes``: ``"amx4"`` where every code is in 0..15 and every scale and offset a
    float16 (a GGUF Q4_1 weight's always are) unless ``SPECDEC_AMX4=off``, ``"amx"`` where every code is in 0..31,
    else ``"amx8"``.

    Raises:
        ValueError: ``SPECDEC_AMX4`` is neither ``on`` (the default) nor ``off``.
    """
    return _switched(_narrowest(codes))


def _switched(narrowest: str) -> str:
    """The form that serves codes whose narrowest form is ``narrowest``, as ``SPECDEC_AMX4`` allows."""
    switch = os.environ.get("SPECDEC_AMX4", "on").lower()
    if switch not in ("on", "off"):
        raise ValueError(f"SPECDEC_AMX4 must be 'on' or 'off', got {switch!r}")
    return "amx" if narrowest == "amx4" and switch == "off" else narrowest


def _nibbles(q: torch.Tensor) -> torch.Tensor:
    """Tiles of 512 codes in 0..15 (``q`` flat, in the tiles' order) -> 256 bytes each: the 16-bit word ``i`` holds
    codes ``i``, ``128 + i``, ``256 + i`` and ``384 + i`` of its tile in its four nibbles, lowest first, little-endian
    (``skinny_amx.cpp``'s ``nibbles_to_bf16`` reads them so)."""
    quarters = q.reshape(-1, 4, 128).to(torch.int32)
    words = quarters[:, 0] | quarters[:, 1] << 4 | quarters[:, 2] << 8 | quarters[:, 3] << 12
    return torch.stack([words & 0xFF, words >> 8], dim=-1).to(torch.uint8).reshape(-1)


def amx_layout(codes: Codes, form: str | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """``codes`` (``q [N, K]``, ``d``, ``m [N, K / 32]``) in the kernel's layout for ``form`` (default: their
    :func:`amx_form`; a wider form serves them too, ``amx8`` any codes):
    ``(q, d, m, small)`` with ``q`` ``[N / 16 / PAIR groups][K / 32][tiles of the group][16 k-pairs][16 outputs][2]``
    (flat; int8, or for ``amx4`` two codes a byte as :func:`_nibbles` packs each tile, uint8), ``d`` and ``m``
    ``[N / 16, K / 32, 16]`` (float32, ``amx4``: float16) and ``small`` 1 where every code is in 0..31.

    Raises:
        ValueError: ``N`` is not a multiple of 16 or ``K`` of 32, or ``form`` cannot hold these codes.
    """
    n, k = codes.q.shape
    narrowest = _narrowest(codes)
    fits = AMX_KERNELS[AMX_KERNELS.index(narrowest) :]
    if form is not None and form not in fits:
        raise ValueError(f"the AMX form {form!r} cannot hold these codes (forms that can: {', '.join(fits)})")
    form = form or _switched(narrowest)
    if n % 16 or k % QBLOCK:
        raise ValueError(f"the AMX kernel takes N a multiple of 16 and K of {QBLOCK}, got a weight [{n}, {k}]")
    tiles, blocks = n // 16, k // QBLOCK
    q = codes.q.reshape(tiles, 16, blocks, 16, 2).permute(0, 2, 3, 1, 4)  # [tile, block, k-pair, output, 2]
    q = torch.cat([q[t : t + PAIR].transpose(0, 1).reshape(-1) for t in range(0, tiles, PAIR)])

    def per_tile(t: torch.Tensor) -> torch.Tensor:
        t = t.reshape(tiles, 16, blocks).transpose(1, 2).contiguous()
        return t.half() if form == "amx4" else t

    q = _nibbles(q) if form == "amx4" else q.contiguous()
    return q, per_tile(codes.d), per_tile(codes.m), int(form != "amx8")


def amx_synthetic(n_out: int, n_in: int, generator: torch.Generator, form: str) -> Codes:
    """Random codes of a ``[n_out, n_in]`` weight for timing ``form`` (``"amx4"``: codes 0..15 with float16 scales and
    offsets; ``"amx"``: 0..31; ``"amx8"``: -127..127; the kernel's speed depends on that, not on the values)."""
    codes = Codes.synthetic(n_out, n_in, generator)
    if form == "amx4":
        d = codes.d.half().float()
        codes = Codes(codes.q, d, -8 * d, "synthetic")
    elif form == "amx":
        codes = Codes(codes.q * 2 + 1, codes.d, codes.m, "synthetic")  # 1..31: one byte each
    elif form == "amx8":
        codes = Codes(
            torch.randint(-127, 128, codes.q.shape, generator=generator, dtype=torch.int8),
            codes.d,
            torch.zeros_like(codes.m),
            "synthetic",
        )
    return codes
