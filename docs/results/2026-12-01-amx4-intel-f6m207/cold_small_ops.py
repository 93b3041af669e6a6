"""A small op's cost right after a step has streamed the caches (as a draft step runs after the target's forward).

    python docs/results/2026-12-01-amx4-intel-f6m207/cold_small_ops.py   # cold_small_ops.txt

``rms_norm`` of one 576-wide row (the draft head's norm), microseconds, median of 15: right after summing 120 MB
(its code and data evicted from L1/L2), then at once again, at 2 and 1 threads; and warm in a loop.
"""

import time

import torch

x, w = torch.randn(1, 1, 576), torch.randn(576)
big = torch.randn(30_000_000)


def norm() -> None:
    torch.nn.functional.rms_norm(x, (576,), w, 1e-5)


def after_streaming(first, second, threads: int) -> tuple[float, float]:
    torch.set_num_threads(threads)
    out = []
    for _ in range(15):
        big.sum()
        t0 = time.perf_counter()
        first()
        t1 = time.perf_counter()
        second()
        out.append(((t1 - t0) * 1e6, (time.perf_counter() - t1) * 1e6))
    return sorted(out)[7]


def warm(threads: int) -> float:
    torch.set_num_threads(threads)
    for _ in range(1000):
        norm()
    t0 = time.perf_counter()
    for _ in range(2000):
        norm()
    return (time.perf_counter() - t0) / 2000 * 1e6


for _ in range(100):
    norm()
for label, first, threads in (("rms_norm", norm, 2), ("rms_norm", norm, 1), ("x + 1", lambda: x.add(1.0), 2)):
    a, b = after_streaming(first, norm, threads)
    print(f"after streaming, {threads} thread(s): {label}, then rms_norm (us): {a:.1f}, {b:.1f}")
print(f"warm loop: {warm(2):.1f} us (2 threads), {warm(1):.1f} us (1 thread)")
