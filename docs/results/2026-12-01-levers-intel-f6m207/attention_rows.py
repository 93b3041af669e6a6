"""The few-row attention kernel's time by query rows and cache span, SmolLM2's shapes, warm (issue 45).

    python docs/results/2026-12-01-levers-intel-f6m207/attention_rows.py   # attention_rows.txt

``specdec::skinny_attention`` with 9 query heads over 3 key/value heads of 64, 300 visible keys (then the rows' own,
causal) in a buffer of ``S`` slots, as a tree forward calls it per layer; median of 15 rounds of 100 calls.
"""

import statistics
import time

import torch

from specdec.backends import skinny


def main() -> None:
    skinny.load()
    torch.set_num_threads(2)
    for span in (320, 1024, 2048):
        cells = []
        for rows in (1, 4, 8, 16):
            q, k, v = torch.randn(1, 9, rows, 64), torch.randn(1, 3, span, 64), torch.randn(1, 3, span, 64)
            mask = torch.full((1, 1, rows, span), float("-inf"))
            mask[..., :300] = 0
            mask[0, 0, :, 300 : 300 + rows] = torch.where(torch.tril(torch.ones(rows, rows)) > 0, 0.0, float("-inf"))
            args = (q, k, v, mask, 0.125, 0)
            ts = []
            for _ in range(15):
                start = time.perf_counter()
                for _ in range(100):
                    torch.ops.specdec.skinny_attention(*args)
                ts.append((time.perf_counter() - start) / 100)
            cells.append(f"{rows} rows {statistics.median(ts) * 1e6:4.0f} us")
        print(f"S = {span:4d}: " + ", ".join(cells), flush=True)


if __name__ == "__main__":
    main()
