"""fbgemm's dynamic int8 GEMM (``Int8Linear``) against the int8-weight skinny kernel (``specdec::skinny_linear_w8``)
on the EAGLE-3 head's shapes (fused q/k/v and gate/up) and a vocabulary projection, weights cold (a 400 MB sweep
before each call, which also leaves the threads cold), 2 threads, 1-16 rows; medians of 25 calls, in ms.

    .venv/bin/python docs/results/2026-11-30-draft-w8-intel-f6m106/w8_micro.py [isa: 0 best, 1 AVX2, 2 AVX-512]
"""

import sys
import time
import warnings

import torch
from torch import nn

from specdec.backends.cpu import cpu_name
from specdec.backends.kernels import Int8Linear
from specdec.backends.skinny import W8Linear, load

load()
torch.set_num_threads(2)
warnings.simplefilter("ignore")
big = torch.rand(100_000_000)
isa = int(sys.argv[1]) if len(sys.argv) > 1 else 0
print(f"cpu={cpu_name()}; isa={isa}; fbgemm / w8 ms")


def bench(f, x: torch.Tensor, n: int = 25) -> float:
    for _ in range(3):
        f(x)
    ts = []
    for _ in range(n):
        big.sum()
        t = time.perf_counter()
        f(x)
        ts.append(time.perf_counter() - t)
    return sorted(ts)[n // 2] * 1e3


for k, nout in [(1728, 576), (1152, 960), (576, 576), (576, 3072), (1536, 576), (576, 49152)]:
    lin = nn.Linear(k, nout, bias=False)
    q, w8 = Int8Linear(lin), W8Linear(lin)
    qweight, scale = w8.qweight, w8.scale

    def kernel(x: torch.Tensor, qweight=qweight, scale=scale) -> torch.Tensor:
        return torch.ops.specdec.skinny_linear_w8(x, qweight, scale, None, isa)

    line = []
    for m in (1, 2, 4, 8, 16):
        x = torch.randn(m, k)
        assert torch.equal(kernel(x[:1]), kernel(x)[:1])  # row-invariant
        line.append(f"M={m} {bench(q, x):.3f} / {bench(kernel, x):.3f}")
    print(f"K={k} N={nout}: " + "  ".join(line), flush=True)
