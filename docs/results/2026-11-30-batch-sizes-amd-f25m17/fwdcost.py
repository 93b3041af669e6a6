"""A batched forward's cost against tree nodes per row: B rows of chains of n nodes against B rows of one token.

    .venv/bin/python docs/results/2026-11-30-batch-sizes-amd-f25m17/fwdcost.py 1,4,8

The first B MT-bench prompts joined as rows of :class:`specdec.rows.BatchRows` (float32 SmolLM2, eager shapes, the
fast path's defaults, 2 threads); four rounds over n = 1, 2, 3, 4, 6, 8, each the best of 3 forwards, every row
committing one node per forward; the median per n and its ratio to n = 1.
"""

import statistics
import sys
import time

import torch

from specdec.assets import chat_ids, mtbench_prompts
from specdec.models import load_smollm2
from specdec.rows import BatchRows
from specdec.target import HFTarget
from specdec.tree import DraftTree

torch.set_num_threads(2)
model, tok = load_smollm2()
target = HFTarget(model, max_len=1024, static_shapes=False)
ids = [chat_ids(tok, p.text) for p in mtbench_prompts()[:8]]


def chain(n: int) -> DraftTree:
    return DraftTree.from_parents(torch.randint(0, 1000, (n,)), torch.arange(n) - 1, n)


for batch in [int(b) for b in sys.argv[1].split(",")]:
    rows = BatchRows(target, 1024)
    for i in ids[:batch]:
        rows.join(i)
    times: dict[int, list[float]] = {}
    for _ in range(4):
        for n in [1, 2, 3, 4, 6, 8]:
            best = []
            for _ in range(3):
                t = time.perf_counter()
                rows.forward([chain(n)] * batch)
                best.append(time.perf_counter() - t)
                for r in range(batch):
                    rows.commit(r, [0])
                rows.advance()
            times.setdefault(n, []).append(min(best))
    base = statistics.median(times[1])
    cells = "  ".join(
        f"n={n}:{1000 * statistics.median(v):.1f}ms({statistics.median(v) / base:.2f})" for n, v in times.items()
    )
    print(f"B={batch} clock {rows.clock} len {rows.lengths[:2]}: {cells}")
