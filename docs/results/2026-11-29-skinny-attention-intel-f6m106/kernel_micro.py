"""The few-row attention against SDPA alone (as ``specdec_sdpa`` calls it: GQA in place, an additive tree mask),
SmolLM2's heads (9 query, 3 kv, 64 wide), keys trimmed to those a forward has (as the eager cache passes them), hot in
cache, 2 threads: microseconds per call (300 calls after 20), the largest difference from SDPA, and whether each row
equals its query alone over only the keys it sees (bitwise).

    .venv/bin/python docs/results/2026-11-29-skinny-attention-intel-f6m106/kernel_micro.py
"""

import time

import torch

from specdec.backends import skinny
from specdec.backends.gqa import _gqa_sdpa

skinny.load()
torch.set_num_threads(2)
op = torch.ops.specdec.skinny_attention


def per_call(f, n: int = 300) -> float:
    for _ in range(20):
        f()
    start = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - start) / n * 1e6


g = torch.Generator().manual_seed(0)
with torch.inference_mode():
    for keys in (64, 256, 512, 1024):
        for rows in (1, 4, 8, 16):
            q = torch.randn(1, 9, rows, 64, generator=g)
            k, v = (torch.randn(1, 3, keys, 64, generator=g) for _ in range(2))
            allowed = torch.ones(rows, keys, dtype=torch.bool)
            allowed[:, keys - rows :] = (torch.rand(rows, rows, generator=g) < 0.5).tril() | torch.eye(rows).bool()
            mask = torch.zeros(rows, keys).masked_fill_(~allowed, torch.finfo(torch.float32).min)[None, None]
            ref = _gqa_sdpa(None, q, k, v, mask, scaling=0.125)[0]
            out = op(q, k, v, mask, 0.125)
            alone = all(
                torch.equal(
                    op(q[:, :, t : t + 1], k[:, :, allowed[t]], v[:, :, allowed[t]], None, 0.125)[:, 0], out[:, t]
                )
                for t in range(rows)
            )
            args = (q, k, v, mask)
            sdpa = per_call(lambda a=args: _gqa_sdpa(None, *a, scaling=0.125))
            few = per_call(lambda a=args: op(*a, 0.125))
            print(
                f"keys {keys:4d} rows {rows:2d}: SDPA {sdpa:6.1f} us  few-row {few:6.1f} us  {sdpa / few:.2f}x  "
                f"max |diff| {(out - ref).abs().max().item():.1e}  rows bitwise alone: {alone}"
            )
