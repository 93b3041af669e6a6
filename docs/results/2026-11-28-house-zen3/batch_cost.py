"""Experiment for issue 49 (batched decoding): what a forward of B rows x n new tokens costs against a one-token
step of one row, on the eager fast path (packed weights), with a KV cache of `context` tokens per row. One process,
interleaved rounds, medians. Run from the repository root: python docs/results/2026-11-28-house-zen3/batch_cost.py"""

import statistics
import sys
import time

import torch
from transformers import DynamicCache

from specdec.backends.cpu import cpu_name
from specdec.models import load_smollm2
from specdec.target import HFTarget

torch.set_num_threads(2)
model, _ = load_smollm2()
fast = HFTarget(model, 512, weights="auto").model  # the transformed copy our target runs
context = int(sys.argv[1]) if len(sys.argv) > 1 else 120
shapes = [(b, n) for b in (1, 2, 4, 8) for n in (1, 4, 8)]
g = torch.Generator().manual_seed(0)
prompts = {b: torch.randint(0, 49152, (b, context), generator=g) for b in (1, 2, 4, 8)}
caches = {}
with torch.no_grad():
    for b, ids in prompts.items():
        caches[b] = DynamicCache(config=fast.config)
        fast(input_ids=ids, use_cache=True, cache=caches[b])
    times = {s: [] for s in shapes}
    for _round in range(9):
        for b, n in shapes:
            x = torch.randint(0, 49152, (b, n), generator=g)
            t0 = time.perf_counter()
            fast(input_ids=x, use_cache=True, cache=caches[b])
            times[(b, n)].append(time.perf_counter() - t0)
            caches[b].crop(-n)
med = {s: statistics.median(v[1:]) * 1e3 for s, v in times.items()}
print(f"cpu={cpu_name()} threads=2 context={context} float32 fast path; ms per forward, and / T(1 row, 1 token)")
base = med[(1, 1)]
for b in (1, 2, 4, 8):
    cells = "  ".join(f"n={n}: {med[(b, n)]:6.1f} ms ({med[(b, n)] / base:4.2f})" for n in (1, 4, 8))
    print(f"B={b}  {cells}")
