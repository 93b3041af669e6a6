"""A forward of n rows against the 1-token step: SmolLM2's ahead-of-time package with stock linears (inductor's
GEMMs, ``weights="stock"``) against the package ``weights="auto"`` builds from this CPU's measured kernel table.

    .venv/bin/python docs/results/2026-11-29-package-auto-intel-f6m106/package_rows.py [--rounds 3]

Both targets in one process (packages built first where this machine has none): after a 120-token prompt, each tree
forward of a chain of n tokens, n in 1, 2, 3, 4, 8, 16, 32, timed as the median of 7 runs, the targets alternating;
prints milliseconds and T(n)/T(1) per target, per round.
"""

import argparse
import statistics
import time

import torch

from specdec.models import load_smollm2
from specdec.target import HFTarget
from specdec.tree import DraftTree

parser = argparse.ArgumentParser()
parser.add_argument("--rounds", type=int, default=3)
args = parser.parse_args()
torch.set_num_threads(2)
SIZES, REPEATS = (1, 2, 3, 4, 8, 16, 32), 7
model, _ = load_smollm2()
paths = {
    "stock": HFTarget(model, max_len=512, static_shapes="aot", weights="stock"),
    "auto": HFTarget(model, max_len=512, static_shapes="aot"),
}
for name, target in paths.items():
    print(f"{name}: {target.execution.describe()}", flush=True)
    target.warm_up()
prompt = torch.arange(120) % 1000 + 100
chains = {n: DraftTree.from_parents(torch.arange(n) + 200, torch.arange(n) - 1, n) for n in SIZES}
for r in range(args.rounds):
    times: dict[str, dict[int, list[float]]] = {name: {n: [] for n in SIZES} for name in paths}
    for target in paths.values():
        target.prefill(prompt)
    for _ in range(REPEATS):
        for n in SIZES:
            for name, target in paths.items():
                start = time.perf_counter()
                target.forward_tree(chains[n])
                times[name][n].append(time.perf_counter() - start)
    for name, target in paths.items():
        ms = {n: statistics.median(v) * 1e3 for n, v in times[name].items()}
        cells = "  ".join(f"{n}: {ms[n]:.1f} ms ({ms[n] / ms[1]:.2f})" for n in SIZES)
        print(f"round {r + 1} {name:5s} [{target.execution.label}] {cells}", flush=True)
