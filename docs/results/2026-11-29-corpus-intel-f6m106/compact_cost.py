"""What one KV-cache compaction costs on the package path: ``PositionCache.compact`` of a fixed-size path after
a prefill (every layer's keys and values, index_select + index_copy_), median of 200.

    .venv/bin/python docs/results/2026-11-29-corpus-intel-f6m106/compact_cost.py
"""

import time

import torch

from specdec import HFTarget, chat_ids
from specdec.assets import mtbench_prompts
from specdec.models import load_smollm2

torch.set_num_threads(2)
model, tok = load_smollm2()
t = HFTarget(model, max_len=1024, in_place=True)
print(t.execution.describe())
t.prefill(chat_ids(tok, mtbench_prompts()[0]))
for n in (2, 6, 8):
    acc = torch.tensor([0] + [-1] * (n - 1))
    for _ in range(20):
        t.cache.compact(t.length, acc.clamp(min=0))
    ts = []
    for _ in range(200):
        a = time.perf_counter()
        t.cache.compact(t.length, acc.clamp(min=0))
        ts.append(time.perf_counter() - a)
    ts.sort()
    print(f"compact of a {n}-node path: median {ts[100] * 1e3:.3f} ms")
