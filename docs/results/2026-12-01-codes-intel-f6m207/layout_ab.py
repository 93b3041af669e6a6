"""Same process: the coded kernel's two layouts (v1: codes, scales and offsets in three arrays; v2: packed blocks,
each block's d, m and 32 codes together, one stream per weight row) against the float32 kernel, all 211 SmolLM2
linears per row count, interleaved, median of 9.

How it ran (2026-12-01, Xeon f6m207): the library was built with layout_v2_skinny_q.cpp in place of
specdec/backends/skinny_q.cpp (so ``specdec::skinny_linear_q`` took packed blocks, ``Codes.pack()`` made them), and
380098d's skinny_q.cpp was built apart with its op namespace renamed ``specdec_v1`` (/tmp/q/b1/sq_v1.so). v2 lost
at 1-8 rows (1.27-1.59x v1's time) and was not committed."""

import time

import torch

import specdec.backends.skinny as sk
from specdec.backends.skinny_codes import exact_codes
from specdec.models import load_smollm2

sk.load()
torch.ops.load_library("/tmp/q/b1/sq_v1.so")
torch.set_num_threads(2)
lins = [m for m in load_smollm2()[0].modules() if isinstance(m, torch.nn.Linear)]
cs = [exact_codes(m.weight) for m in lins]
packed = [c.pack() for c in cs]


def run(M, kind):
    xs = {}
    t = time.perf_counter()
    for lin, c, p in zip(lins, cs, packed, strict=True):
        x = xs.get(lin.in_features)
        if x is None:
            x = xs[lin.in_features] = torch.randn(M, lin.in_features)
        if kind == "v1":
            torch.ops.specdec_v1.skinny_linear_q(x, c.q, c.d, c.m, None)
        elif kind == "v2":
            torch.ops.specdec.skinny_linear_q(x, p, None)
        else:
            torch.ops.specdec.skinny_linear(x, lin.weight, None)
    return time.perf_counter() - t


for M in (1, 2, 4, 8, 12, 16):
    r = {k: [] for k in ("fp32", "v1", "v2")}
    for _ in range(9):
        for k in r:
            r[k].append(run(M, k))
    med = {k: sorted(v)[4] * 1e3 for k, v in r.items()}
    print(
        f"M={M:2d}: fp32 {med['fp32']:.1f} ms, v1 {med['v1']:.1f} ms, v2 {med['v2']:.1f} ms; "
        f"v2/v1 {med['v2'] / med['v1']:.3f}"
    )
