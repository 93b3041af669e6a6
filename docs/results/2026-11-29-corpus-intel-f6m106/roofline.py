"""This CPU's rough limits, for reading the kernel figures: read bandwidth (the sum of a 540 MB float32 tensor), a
2048 x 2048 float32 GEMM, and F.linear of 1, 8 and 16 rows over 150 weights of 1536 x 576 (530 MB, streamed from
memory); best and median of a few runs, with the torch threads given.

    for t in 1 2; do .venv/bin/python docs/results/2026-11-29-corpus-intel-f6m106/roofline.py $t; done
"""

import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F


def best_and_median(run: Callable[[], object], repeats: int = 7) -> tuple[float, float]:
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - start)
    seconds.sort()
    return seconds[0], seconds[len(seconds) // 2]


def main() -> None:
    torch.set_num_threads(int(sys.argv[1]))
    x = torch.randn(135_000_000)
    b, m = best_and_median(lambda: x.sum())
    print(f"read GB/s best {x.numel() * 4 / b / 1e9:.1f} median {x.numel() * 4 / m / 1e9:.1f}")
    a, c = torch.randn(2048, 2048), torch.randn(2048, 2048)
    b, m = best_and_median(lambda: a @ c)
    print(f"sgemm 2048 GFLOP/s best {2 * 2048**3 / b / 1e9:.0f} median {2 * 2048**3 / m / 1e9:.0f}")
    weights = [torch.randn(1536, 576) for _ in range(150)]
    for rows in (1, 8, 16):
        v = torch.randn(rows, 576)
        b, m = best_and_median(lambda v=v: [F.linear(v, w) for w in weights], 5)
        print(f"{rows} rows over 530 MB: {b * 1e3:.1f} ms best, {m * 1e3:.1f} median")


if __name__ == "__main__":
    main()
