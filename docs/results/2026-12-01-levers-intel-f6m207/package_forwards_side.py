"""One side of a package-forward comparison across processes: SmolLM2's ahead-of-time package (``weights="auto"``,
2048-slot cache), forwards of 1-16 rows after a 250-token prompt, medians of 10 passes; saves the 8-row logits.

    python docs/results/2026-12-01-levers-intel-f6m207/package_forwards_side.py LOGITS.pt

Run from a checkout of each side (``PYTHONPATH`` at the older one's worktree), alternating; the logits of two sides
on the same kernel table must be bitwise equal (the attention change keeps every bit).
"""

import json
import statistics
import sys
import time

import torch

from specdec.models import load_smollm2
from specdec.target import HFTarget

ROWS, CONTEXT, PASSES = (1, 2, 4, 8, 16), 250, 11


def main() -> None:
    torch.set_num_threads(2)
    model, _ = load_smollm2()
    target = HFTarget(model, static_shapes="aot", max_len=2048)
    target.warm_up()
    ids = torch.arange(CONTEXT + max(ROWS)) % 1000 + 100
    target.runner.forward(ids[:CONTEXT], torch.arange(CONTEXT), 0)
    ms = {n: [] for n in ROWS}
    for _ in range(PASSES):
        for n in ROWS:
            start = time.perf_counter()
            target.runner.forward(ids[CONTEXT : CONTEXT + n], torch.arange(CONTEXT, CONTEXT + n), CONTEXT)
            ms[n].append((time.perf_counter() - start) * 1e3)
    logits = target.runner.forward(ids[CONTEXT : CONTEXT + 8], torch.arange(CONTEXT, CONTEXT + 8), CONTEXT)[0]
    torch.save(logits.float(), sys.argv[1])
    print(json.dumps({n: round(statistics.median(v[1:]), 2) for n, v in ms.items()}), flush=True)


if __name__ == "__main__":
    main()
