"""The package's forward of n rows after a short and a long context, and in caches of different capacity: does either
explain why the decoding loop paid 1.15-1.17x the cost curve's price (a probe after 256 tokens in a cache of 321
slots) for trees on Spec-Bench (a cache of the longest prompt + 96 + the largest tree)?

    .venv/bin/python docs/results/2026-11-30-package-amd-f25m17/context_rows.py [--contexts 256 1024] [--rounds 2]
        [--max-lens L ...]

One target per cache capacity (``--max-lens``; default: the largest context + 64) on this machine's cached package
(``static_shapes="aot"``, the rule's stock package here); per round, target and context: prefill that many tokens,
then chains of n tokens (n in 1, 4, 8) timed as the median of 7, in turn; prints ms and T(n)/T(1).
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
parser.add_argument("--max-lens", type=int, nargs="+", default=None)
args = parser.parse_args()
torch.set_num_threads(2)
SIZES, REPEATS = (1, 4, 8), 7
model, _ = load_smollm2()
targets = {n: HFTarget(model, max_len=n, static_shapes="aot") for n in args.max_lens or [max(args.contexts) + 64]}
for target in targets.values():
    print(target.execution.describe(), flush=True)
    target.warm_up()
chains = {n: DraftTree.from_parents(torch.arange(n) + 200, torch.arange(n) - 1, n) for n in SIZES}
for r in range(args.rounds):
    for (capacity, target), context in ((t, c) for t in targets.items() for c in args.contexts if c + 8 < t[0]):
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
        print(f"round {r + 1} cache {capacity} context {context}: {cells}", flush=True)
