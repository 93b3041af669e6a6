"""What a batched cycle's forward carries besides its rows' real tree nodes: the padding of every row's tree to the
largest, and the dead cache slots its attention reads (issue 49).

    .venv/bin/python docs/results/2026-11-30-attention-amd-f25m17/batched_padding.py BATCH METHOD [METHOD ...]

The first ``BATCH`` MT-bench prompts, 64 new tokens, greedy, ``generate_batch(speculate="always")``; per forward:
real tree nodes (all rows), padded rows (``BATCH x`` the largest tree), slots a row's attention reads (the clock
plus the tree) and live tokens per row.
"""

import collections
import sys

import torch

from specdec import rows as rows_mod
from specdec.assets import chat_ids, mtbench_prompts
from specdec.generate import StopCondition
from specdec.methods import build_method
from specdec.models import load_smollm2
from specdec.target import HFTarget

torch.set_num_threads(2)
model, tok = load_smollm2()
target = HFTarget(model, max_len=1024, static_shapes=False)
ids = [chat_ids(tok, p.text) for p in mtbench_prompts()[:8]]
batch = int(sys.argv[1])
stats: collections.Counter = collections.Counter()
forward = rows_mod.BatchRows.forward


def counted(self, trees):
    n = max(t.num_nodes for t in trees)
    stats["real"] += sum(t.num_nodes for t in trees)
    stats["padded"] += n * len(trees)
    stats["calls"] += 1
    stats["slots"] += self.clock + n
    stats["live"] += sum(self.lengths)
    return forward(self, trees)


rows_mod.BatchRows.forward = counted
for name in sys.argv[2:]:
    gen = build_method(name, target)
    gen.generate_batch(ids[:2], None, StopCondition(max_new_tokens=8))
    stats.clear()
    gen.generate_batch(ids[:batch], None, StopCondition(max_new_tokens=64), max_batch=batch, speculate="always")
    c = stats["calls"]
    print(
        f"{name} batch {batch}: real rows per forward {stats['real'] / c:.1f}, padded {stats['padded'] / c:.1f}; "
        f"slots read per row {stats['slots'] / c:.0f}, live tokens per row {stats['live'] / c / batch:.0f}"
    )
