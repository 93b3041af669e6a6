"""The row padding's measurement repeated in one process: what each fresh measurement chooses under the paired
criterion (:func:`specdec.backends.row_padding.chosen_rows`), and what the medians alone would have chosen.

    .venv/bin/python docs/results/2026-11-30-padded-amd-f25m17/padding_refreshes.py [--refreshes 6]

Per refresh: each count's median ms of the 1-token step with every packed linear padding to k rows, the passes in
which it beat the unpadded step, the choice by medians alone (the criterion before 2026-11-30's sign test) and the
paired choice (after a second, pooled measurement where the two disagree).
"""

import argparse
import statistics

import torch

from specdec.backends.choice import prepare_model
from specdec.backends.row_padding import MARGIN, chosen_rows, padding_times, wins_needed
from specdec.models import load_smollm2

parser = argparse.ArgumentParser()
parser.add_argument("--refreshes", type=int, default=6)
args = parser.parse_args()
torch.set_num_threads(2)
model, _ = load_smollm2()
prepared, _ = prepare_model(model, "auto", False, in_place=False)
for r in range(args.refreshes):
    passes = padding_times(prepared, refresh=True)
    median = {k: statistics.median(v) for k, v in passes.items()}
    best = min(sorted(median), key=lambda k: median[k])
    by_median = best if median[best] < (1 - MARGIN) * median[1] else 1
    n = len(passes[1])
    cells = "  ".join(
        f"{k}: {median[k] * 1e3:.1f} ({sum(a < b for a, b in zip(v, passes[1], strict=True))}/{n})"
        for k, v in sorted(passes.items())
    )
    print(f"refresh {r + 1}: {cells}; medians alone: {by_median}; paired ({wins_needed(n)}/{n}): {chosen_rows(passes)}")
