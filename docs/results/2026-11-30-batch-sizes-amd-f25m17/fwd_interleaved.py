"""A batched forward of 4 rows with 1 or 2 nodes each, back to back or after other work (as drafting sits between a
loop's forwards): the min and median of 30 forwards each.

    .venv/bin/python docs/results/2026-11-30-batch-sizes-amd-f25m17/fwd_interleaved.py

"Busy": twenty ``[64, 576] x [576, 16384]`` products and softmaxes (about an EAGLE-3 head's root step for a batch of
4 in size) before each forward.
"""

import statistics
import time

import torch

from specdec.assets import chat_ids, mtbench_prompts
from specdec.methods import build_method
from specdec.models import load_smollm2
from specdec.rows import BatchRows
from specdec.target import HFTarget
from specdec.tree import DraftTree

torch.set_num_threads(2)
model, tok = load_smollm2()
target = HFTarget(model, max_len=1024, static_shapes=False)
build_method("eagle3", target)  # the target as a speculative method runs it (its hidden states requested)
ids = [chat_ids(tok, p.text) for p in mtbench_prompts()[:4]]
x, w = torch.randn(64, 576), torch.randn(576, 16384)
rows = BatchRows(target, 1024)
for i in ids:
    rows.join(i)
for busy in (False, True):
    times: dict[int, list[float]] = {}
    for _ in range(10):
        for n in (1, 2):
            for _ in range(3):
                for _ in range(20 if busy else 0):
                    (x @ w).softmax(-1)
                tree = DraftTree.from_parents(torch.randint(0, 1000, (n,)), torch.arange(n) - 1, n)
                t = time.perf_counter()
                rows.forward([tree] * 4)
                times.setdefault(n, []).append(time.perf_counter() - t)
                for r in range(4):
                    rows.commit(r, [0])
                rows.advance()
    cells = {n: (round(1000 * min(v), 1), round(1000 * statistics.median(v), 1)) for n, v in times.items()}
    print("busy" if busy else "back-to-back", "(min, median) ms:", cells, "clock", rows.clock)
