"""SDPA (as ``specdec_sdpa`` calls it: grouped-query heads in place) against ``specdec::skinny_attention`` alone, on
SmolLM2-135M's head shape (9 query heads, 3 kv heads of 64), float32, 2 threads: one sequence's 1-token step and
13-node tree, and a batch of 4 rows of 3 tree nodes (the batched loop's shape), at 200-1000 keys; a chain's mask.

    .venv/bin/python docs/results/2026-11-30-attention-amd-f25m17/attention_micro.py
"""

import time

import torch
import torch.nn.functional as F

from specdec.backends import skinny
from specdec.backends.cpu import cpu_name

torch.set_num_threads(2)
skinny.load()


def bench(fn, reps: int = 200) -> float:
    """Microseconds per call (after 10 warm-up calls)."""
    for _ in range(10):
        fn()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps * 1e6


print(f"cpu={cpu_name()} torch={torch.__version__} threads={torch.get_num_threads()}")
for b, n, s in [(1, 1, 200), (1, 1, 1000), (1, 13, 200), (1, 13, 1000), (4, 3, 300), (4, 3, 1000)]:
    q, k, v = torch.randn(b, 9, n, 64), torch.randn(b, 3, s, 64), torch.randn(b, 3, s, 64)
    seen = torch.ones(b, 1, n, s, dtype=torch.bool)
    seen[..., s - n :] = torch.ones(n, n, dtype=torch.bool).tril()
    mask = None if n == 1 else torch.zeros(b, 1, n, s).masked_fill(~seen, float("-inf"))
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True).transpose(1, 2)
    gap = (torch.ops.specdec.skinny_attention(q, k, v, mask, 0.125) - ref).abs().max().item()
    sdpa = bench(lambda q=q, k=k, v=v, m=mask: F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True))
    few = bench(lambda q=q, k=k, v=v, m=mask: torch.ops.specdec.skinny_attention(q, k, v, m, 0.125))
    print(
        f"batch {b} x {n:2d} rows, {s:4d} keys: SDPA {sdpa:6.0f} us, kernel {few:5.0f} us ({sdpa / few:.2f}x); "
        f"max diff {gap:.1e}"
    )
