"""What row-invariant numerics cost a float32 SmolLM2 forward (eager, 1 and 8 rows after a 256-token prompt),
one process, 3 rounds x 8 forwards each, interleaved: the default (``invariant="auto"``, off for float32),
``invariant=True`` as now (linears on the skinny GEMM as measured, the few-row attention on a float32 cache) and
``invariant=True`` as before (prepared with ``SPECDEC_SKINNY=off``: every linear packed, float64 SDPA on a float64
cache).

    .venv/bin/python docs/results/2026-11-29-skinny-attention-intel-f6m106/invariant_cost.py
"""

import os
import time

import torch

from specdec import HFTarget
from specdec.budget import _flat_tree
from specdec.models import load_smollm2

torch.set_num_threads(2)
targets = {}
for name, kw in (("default", {}), ("invariant", {"invariant": True}), ("invariant before", {"invariant": True})):
    model, _ = load_smollm2()
    os.environ["SPECDEC_SKINNY"] = "off" if name == "invariant before" else "auto"  # read when prepared
    target = HFTarget(model, max_len=512, static_shapes=False, **kw)
    print(f"{name}: {target.execution.label} | {target.execution.describe()}")
    target.prefill(torch.randint(0, target.vocab_size, (256,), generator=torch.Generator().manual_seed(1)))
    targets[name] = target
g = torch.Generator().manual_seed(0)
trees = {n: _flat_tree(n, torch.device("cpu"), g, 49152) for n in (1, 8)}
ms: dict[tuple[str, int], list[float]] = {}
for _ in range(3):
    for name, target in targets.items():
        for n, tree in trees.items():
            for _ in range(2):
                target.forward_tree(tree)
            start = time.perf_counter()
            for _ in range(8):
                target.forward_tree(tree)
            ms.setdefault((name, n), []).append((time.perf_counter() - start) / 8 * 1e3)
for n in trees:
    best = {name: min(ms[name, n]) for name in targets}
    print(
        f"{n} rows (best of 3 rounds): default {best['default']:.1f} ms, invariant now {best['invariant']:.1f} ms "
        f"({best['invariant'] / best['default']:.2f}x), before {best['invariant before']:.1f} ms "
        f"({best['invariant before'] / best['default']:.2f}x)"
    )
