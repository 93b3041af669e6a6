"""Exact block codes of a float32 weight: ``w[n, k] = d[n, b] * q[n, k] + m[n, b]`` bit for bit, ``b = k // 32``.

A model loaded from a GGUF file holds float32 weights that are block codes dequantized: transformers' loader computes
``d * q + m`` in float32 with ``d`` and ``m`` from float16 and ``q`` a small integer (SmolLM2-135M-Instruct's file:
``Q4_1`` layers, ``q`` in 0..15; a ``Q8_0`` embedding, tied to the vocabulary projection, ``q`` in -127..127 and
``m = 0``). :func:`exact_codes` recovers ``(q, d, m)`` from the float32 weight alone and keeps them only where every
element decodes to the same bits, so a kernel that streams the codes (``specdec::skinny_linear_q``, ``skinny_q.cpp``:
1.25 bytes a weight against 4) multiplies by the target's own weights: nothing is approximated, and a weight that is
not such codes (a float16 or bfloat16 checkpoint, a fine-tuned head) gets none.

Contract (what makes the decoded weight exact): ``d`` holds at most 11 significant bits (it was float16) and ``q`` at
most 8, so ``d * q`` is exact in float32 and adding ``m`` rounds once; the kernel's ``fma(d, q, m)`` rounds that
same sum once. The check below compares the decoded and the given weights' bits, element by element.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["QBLOCK", "SCHEMES", "Codes", "exact_codes"]

#: Inputs per scale and offset (GGUF's Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 blocks; ``skinny_q.cpp``'s ``QBLOCK``).
QBLOCK = 32
#: ``(name, affine, levels)``: how a block's scale is found from its values, as the GGUF quantizers set it; affine:
#: ``m`` the block's least value, ``d = (max - min) / levels``, ``q`` in ``0..levels``; symmetric: ``m = 0``,
#: ``d = v / levels`` with ``v`` the value of largest magnitude (``Q4_0``, ``Q5_0``: ``levels`` -8 and -16, ``q``
#: from ``levels`` to ``-levels - 1``) or its magnitude (``Q8_0``: ``q`` in ``-127..127``). Each candidate is only a
#: guess: :func:`exact_codes` keeps the first whose decoding is bitwise the weight.
#: Weight rows checked at a time (bounds the check's float32 temporaries: a 49152-row vocabulary projection's would
#: be several copies of its 113 MB at once).
CHUNK_ROWS = 4096
SCHEMES = (("q4_1", True, 15), ("q5_1", True, 31), ("q8_0", False, 127), ("q4_0", False, -8), ("q5_0", False, -16))


@dataclass(frozen=True)
class Codes:
    """``q [N, K]`` int8, ``d`` and ``m [N, K / QBLOCK]`` float32: the weight ``[N, K]`` as block codes, and the
    scheme that found them."""

    q: torch.Tensor
    d: torch.Tensor
    m: torch.Tensor
    scheme: str

    def decode(self) -> torch.Tensor:
        """The float32 weight ``[N, K]`` (bitwise the one the codes were found in)."""
        n, k = self.q.shape
        blocks = self.q.reshape(n, k // QBLOCK, QBLOCK).float() * self.d[..., None] + self.m[..., None]
        return blocks.reshape(n, k)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.q, self.d, self.m))

    @staticmethod
    def synthetic(n_out: int, n_in: int, generator: torch.Generator) -> Codes:
        """Random codes of a ``[n_out, n_in]`` weight, for timing the kernel (its speed does not depend on values)."""
        q = torch.randint(0, 16, (n_out, n_in), generator=generator, dtype=torch.int8)
        d = torch.rand(n_out, n_in // QBLOCK, generator=generator) / 64
        return Codes(q, d, -8 * d, "synthetic")


def _scheme(blocks: torch.Tensor, affine: bool, levels: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(q, d, m)`` guessed for ``blocks [N, B, QBLOCK]`` by one of :data:`SCHEMES` (not yet checked)."""
    if affine:
        m = blocks.amin(-1, keepdim=True)
        d = ((blocks.amax(-1, keepdim=True) - m) / levels).half().float()
        low, high = 0, levels
    else:
        m = torch.zeros_like(blocks[..., :1])
        if levels > 0:
            d = (blocks.abs().amax(-1, keepdim=True) / levels).half().float()
            low, high = -levels, levels
        else:
            v = blocks.gather(-1, blocks.abs().argmax(-1, keepdim=True))
            d = (v / levels).half().float()
            low, high = levels, -levels - 1
    q = torch.round((blocks - m) / torch.where(d == 0, torch.ones_like(d), d)).clamp(low, high)
    return q, d, m


@torch.no_grad()
def exact_codes(weight: torch.Tensor) -> Codes | None:
    """The block codes of a float32 CPU ``weight [N, K]`` that decode to its exact bits, or None where it has none
    (another dtype or device, ``K`` not a multiple of :data:`QBLOCK`, no scheme of :data:`SCHEMES` exact for every
    block; a non-finite weight never is)."""
    if weight.dtype != torch.float32 or weight.dim() != 2 or weight.device.type != "cpu":
        return None
    n, k = weight.shape
    if n == 0 or k == 0 or k % QBLOCK:
        return None
    blocks = weight.detach().reshape(n, k // QBLOCK, QBLOCK)
    if not bool(torch.isfinite(blocks).all()):
        return None
    for name, affine, levels in SCHEMES:
        parts = []
        for i in range(0, n, CHUNK_ROWS):  # a scheme is dropped at its first chunk that decodes other bits
            if (part := _exact(blocks[i : i + CHUNK_ROWS], affine, levels)) is None:
                break
            parts.append(part)
        else:
            q, d, m = (torch.cat(t) for t in zip(*parts, strict=True))
            return Codes(q.reshape(n, k), d, m, name)
    return None


def _exact(blocks: torch.Tensor, affine: bool, levels: int) -> tuple[torch.Tensor, ...] | None:
    """``(q int8, d, m)`` of ``blocks [rows, B, QBLOCK]`` by one scheme, or None where one element decodes to other
    bits (the check: the decoded and the given values compared as integers)."""
    q, d, m = _scheme(blocks, affine, levels)
    if not torch.equal((q * d + m).view(torch.int32), blocks.view(torch.int32)):
        return None
    return q.to(torch.int8), d[..., 0].contiguous(), m[..., 0].contiguous()
