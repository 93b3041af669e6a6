"""The package's forward of n rows after a short and a long context: does the context explain why the decoding loop
paid 1.15-1.17x the cost curve's price (measured after 256 tokens) for trees on Spec-Bench?

    .venv/bin/python docs/results/2026-11-30-package-amd-f25m17/context_rows.py [--contexts 256 1024] [--rounds 2]

One target on this machine's cached package (``static_shapes="aot"``, the rule's stock package here); per round and
context: prefill that many tokens, then chains of n tokens (n in 1, 4, 8) timed as the median of 7, the contexts in
turn; prints ms and T(n)/T(1) per context.
"""

import argparse
import statistics
import time

import torch

from specdec.models import load_smollm2
from specdec.target import HFTarget
from specdec.tree import DraftTree

parser = argparse.ArgumentParser()
parser.add_argument("--contexts", type=int, nargs="+", default=[256, 1024])
parser.add_argument("--rounds", type=int, default=2)
args = parser.parse_args()
torch.set_num_threads(2)
SIZES, REPEATS = (1, 4, 8), 7
model, _ = load_smollm2()
target = HFTarget(model, max_len=max(args.contexts) + 64, static_shapes="aot")
print(target.execution.describe(), flush=True)
target.warm_up()
chains = {n: DraftTree.from_parents(torch.arange(n) + 200, torch.arange(n) - 1, n) for n in SIZES}
for r in range(args.rounds):
    for context in args.contexts:
        target.reset()
        target.prefill(torch.arange(context) % 1000 + 100)
        times = {n: [] for n in SIZES}
        for _ in range(REPEATS):
            for n in SIZES:
                start = time.perf_counter()
                target.forward_tree(chains[n])
                times[n].append(time.perf_counter() - start)
        ms = {n: statistics.median(v) * 1e3 for n, v in times.items()}
        cells = "  ".join(f"{n}: {ms[n]:.1f} ms ({ms[n] / ms[1]:.2f})" for n in SIZES)
        print(f"round {r + 1} context {context}: {cells}", flush=True)
