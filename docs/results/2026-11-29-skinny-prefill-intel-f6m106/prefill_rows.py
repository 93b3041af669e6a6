"""specdec::skinny_linear against F.linear (MKL) for the row counts of a long tree and of a prompt prefill, weights
warm, 2 threads, median of 10 calls.

    .venv/bin/python docs/results/2026-11-29-skinny-prefill-intel-f6m106/prefill_rows.py
"""

import time

import torch
import torch.nn.functional as F

from specdec.backends import skinny

skinny.load()
torch.set_num_threads(2)


def kern(x, w):
    return torch.ops.specdec.skinny_linear(x, w)


def bench(f, x, w, n=10):
    for _ in range(2):
        f(x, w)
    ts = []
    for _ in range(n):
        s = time.perf_counter()
        f(x, w)
        ts.append(time.perf_counter() - s)
    return sorted(ts)[n // 2] * 1e3


for nout, k in [(576, 576), (1536, 576), (49152, 576)]:
    w = torch.randn(nout, k) / k**0.5
    for m in (17, 32, 64, 300):
        x = torch.randn(m, k)
        print(f"N={nout} K={k} M={m}: mkl {bench(F.linear, x, w):.3f} skinny {bench(kern, x, w):.3f}", flush=True)
