"""specdec::skinny_linear against F.linear (MKL) on SmolLM2's lm_head and o-projection shapes, weights cold (a
400 MB sweep before each call), 2 threads; checks row invariance on the way.

    .venv/bin/python docs/results/2026-11-29-skinny-intel-f6m106/skinny_micro.py
"""

import time

import torch
import torch.nn.functional as F

from specdec.backends import skinny

skinny.load()
torch.set_num_threads(2)
big = torch.rand(100_000_000)


def kernel(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.ops.specdec.skinny_linear(x, w)


def bench(f, x, w, n=30):
    for _ in range(3):
        f(x, w)
    ts = []
    for _ in range(n):
        big.sum()
        s = time.perf_counter()
        f(x, w)
        ts.append(time.perf_counter() - s)
    return sorted(ts)[n // 2] * 1e3


for k, nout in [(576, 49152), (576, 576)]:
    w = torch.randn(nout, k) / k**0.5
    res = {}
    for m in (1, 2, 8, 16):
        x = torch.randn(m, k)
        a, b = bench(F.linear, x, w), bench(kernel, x, w)
        inv = torch.equal(kernel(x[:1], w), kernel(x, w)[:1])
        res[m] = (a, b)
        print(f"K={k} N={nout} M={m}: F.linear {a:.3f} ms, skinny {b:.3f} ms (row-invariant {inv})")
    r8 = [res[8][i] / res[1][i] for i in (0, 1)]
    r16 = [res[16][i] / res[1][i] for i in (0, 1)]
    print(f"   T(8)/T(1): F.linear {r8[0]:.2f}, skinny {r8[1]:.2f}; T(16)/T(1): {r16[0]:.2f} / {r16[1]:.2f}")
