"""A forward of n rows against the 1-token step: SmolLM2 from its ahead-of-time package and on the eager fast path.

    python docs/results/2026-11-28-aot-zen3/rows.py

Both targets in one process (the package is built first if this machine has none): after a 120-token prompt, each
tree forward of a chain of n tokens, n in 1, 2, 3, 4, 8, 16, 32, is timed as the median of 7 runs, the two paths
alternating; prints milliseconds and T(n)/T(1) per path.
"""

import statistics
import time

import torch

from specdec.models import load_smollm2
from specdec.target import HFTarget
from specdec.tree import DraftTree

torch.set_num_threads(2)
SIZES, REPEATS = (1, 2, 3, 4, 8, 16, 32), 7
model, _ = load_smollm2()
paths = {
    "package": HFTarget(model, max_len=512, static_shapes="aot"),
    "eager": HFTarget(model, max_len=512, static_shapes=False),
}
prompt = torch.arange(120) % 1000 + 100
for target in paths.values():
    target.warm_up()
    target.prefill(prompt)
times: dict[str, dict[int, list[float]]] = {name: {n: [] for n in SIZES} for name in paths}
for _ in range(REPEATS):
    for n in SIZES:
        tree = DraftTree.from_parents(torch.arange(n) + 200, torch.arange(n) - 1, n)
        for name, target in paths.items():
            start = time.perf_counter()
            target.forward_tree(tree)
            times[name][n].append(time.perf_counter() - start)
for name, target in paths.items():
    ms = {n: 1e3 * statistics.median(times[name][n]) for n in SIZES}
    cells = "  ".join(f"{n}: {ms[n]:.1f} ms ({ms[n] / ms[1]:.2f})" for n in SIZES)
    print(f"{name:8s} [{target.execution.label}] {cells}")
