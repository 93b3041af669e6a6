"""All 211 SmolLM2 linears once per row count: the float32 skinny kernel against its coded form
(one process, interleaved, median of 7)."""

import time

import torch

import specdec.backends.skinny as sk
from specdec.backends.skinny_codes import exact_codes
from specdec.models import load_smollm2

sk.load()
torch.set_num_threads(2)
model = load_smollm2()[0]
lins = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
cs = [exact_codes(m.weight) for m in lins]


def run(M, coded):
    xs = {}
    t = time.perf_counter()
    for lin, c in zip(lins, cs, strict=True):
        x = xs.get(lin.in_features)
        if x is None:
            x = xs[lin.in_features] = torch.randn(M, lin.in_features)
        if coded:
            torch.ops.specdec.skinny_linear_q(x, c.q, c.d, c.m, None)
        else:
            torch.ops.specdec.skinny_linear(x, lin.weight, None)
    return time.perf_counter() - t


for M in (1, 4, 8, 12, 16):
    r = {True: [], False: []}
    for _ in range(7):
        for coded in (False, True):
            r[coded].append(run(M, coded))
    f = sorted(r[False])[3] * 1e3
    c = sorted(r[True])[3] * 1e3
    print(f"M={M:2d}: all 211 linears fp32 skinny {f:.1f} ms, coded {c:.1f} ms, ratio {c / f:.2f}")
