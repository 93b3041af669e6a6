"""In what order does the tile unit sum a row's products? The AMX kernel's outputs against float32 emulations.

    python docs/results/2026-12-01-levers-intel-f6m207/amx_order.py   # amx_order.txt

A kernel that gave the AMX form's bits without the tile unit (say AVX-512 for one row, where converting codes to
bfloat16 is most of a warm call) would have to sum each part's 32 products per block exactly as ``TDPBF16PS`` does.
Here ``specdec::skinny_linear_amx`` (offsets zeroed: ``y = sum_b d * ((S_h + S_m) + S_l)``) is compared bitwise with
emulations whose per-block sums ``S`` run in k order, in pairs, reversed, as a pairwise tree, or four exact products
at a time, each add rounded to float32; products are exact (float64 holds them).
"""

import torch

from specdec.backends import skinny
from specdec.backends.skinny_amx import amx_layout, amx_synthetic
from specdec.backends.skinny_codes import Codes

N, K = 64, 128


def parts(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """x = h + m + l exactly, each part 8 significant bits (the kernel's split)."""
    h = (x.view(torch.int32) & -65536).view(torch.float32)
    r = x - h
    m = (r.view(torch.int32) & -65536).view(torch.float32)
    return h, m, r - m


def block_sum(products: list[torch.Tensor], order: str) -> torch.Tensor:
    """One part's 32 exact products (float64) summed with float32 rounding in ``order``."""
    s = torch.zeros_like(products[0])
    r32 = lambda t: t.float().double()  # noqa: E731
    if order == "k order":
        for p in products:
            s = r32(s + p)
    elif order == "reversed":
        for p in reversed(products):
            s = r32(s + p)
    elif order == "pairs exact":
        for i in range(0, 32, 2):
            s = r32(s + (products[i] + products[i + 1]))
    elif order == "fours exact":
        for i in range(0, 32, 4):
            s = r32(s + sum(products[i : i + 4]))
    elif order == "tree":
        v = products
        while len(v) > 1:
            v = [r32(v[i] + v[i + 1]) for i in range(0, len(v), 2)]
        s = v[0]
    return s.float()


def emulate(x: torch.Tensor, codes: Codes, order: str) -> torch.Tensor:
    q = codes.q.double()
    y = torch.zeros(x.shape[0], N)
    for row in range(x.shape[0]):
        acc = torch.zeros(N)
        for b in range(K // 32):
            s = [
                block_sum([p[b * 32 + k].double() * q[:, b * 32 + k] for k in range(32)], order) for p in parts(x[row])
            ]
            acc = (codes.d[:, b].double() * ((s[0] + s[1]) + s[2]).double() + acc.double()).float()  # one fma
        y[row] = acc
    return y


def main() -> None:
    skinny.load()
    g = torch.Generator().manual_seed(1)
    for form in ("amx4", "amx8"):
        c = amx_synthetic(N, K, g, form)
        codes = Codes(c.q, c.d, torch.zeros_like(c.m), "offsets zeroed")
        x = torch.randn(3, K, generator=g)
        out = torch.ops.specdec.skinny_linear_amx(x, *amx_layout(codes, form)[:3], None, amx_layout(codes, form)[3])
        for order in ("k order", "reversed", "pairs exact", "fours exact", "tree"):
            e = emulate(x, codes, order)
            same = (e == out).float().mean().item()
            print(
                f"{form} {order:12s}: " + ("bitwise equal" if torch.equal(e, out) else f"{same:.1%} of outputs equal")
            )


if __name__ == "__main__":
    main()
