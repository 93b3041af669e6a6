"""The package's forwards with SDPA against the few-row attention, one process (issue 45).

    python docs/results/2026-12-01-package-attention-intel-f6m207/forwards_ab.py   # forwards_ab.txt

Two SmolLM2 targets from their ahead-of-time packages (``weights="auto"``: the measured kernels), one prepared under
``SPECDEC_ATTENTION=sdpa``, one under ``few-row``; after a 250-token prompt each runs forwards of 1, 2, 4, 8 and 16
rows, the sides interleaved, 9 passes, the median kept; then the logits of a 4-row forward on both sides (float32
rounding apart: the two attentions sum in other orders).
"""

import copy
import os
import statistics
import time

import torch

from specdec.models import load_smollm2
from specdec.target import HFTarget

ROWS, CONTEXT, PASSES = (1, 2, 4, 8, 16), 250, 9


def prepared(model: torch.nn.Module, mode: str) -> HFTarget:
    os.environ["SPECDEC_ATTENTION"] = mode
    target = HFTarget(copy.deepcopy(model), static_shapes="aot", max_len=512)
    target.warm_up()
    return target


def main() -> None:
    torch.set_num_threads(2)
    model, _ = load_smollm2()
    sides = {mode: prepared(model, mode) for mode in ("sdpa", "few-row")}
    for mode, target in sides.items():
        print(mode, target.execution.attention, target.execution.describe())
    ids = torch.arange(CONTEXT + max(ROWS)) % 1000 + 100
    for target in sides.values():
        target.runner.forward(ids[:CONTEXT], torch.arange(CONTEXT), 0)
    ms = {mode: {n: [] for n in ROWS} for mode in sides}
    for _ in range(PASSES + 1):
        for n in ROWS:
            for mode, target in sides.items():
                start = time.perf_counter()
                target.runner.forward(ids[CONTEXT : CONTEXT + n], torch.arange(CONTEXT, CONTEXT + n), CONTEXT)
                ms[mode][n].append((time.perf_counter() - start) * 1e3)
    for mode in sides:
        print(f"{mode:8s} ms  " + "  ".join(f"{n}: {statistics.median(v[1:]):5.1f}" for n, v in ms[mode].items()))
    ratio = {n: statistics.median(ms["few-row"][n][1:]) / statistics.median(ms["sdpa"][n][1:]) for n in ROWS}
    print("few-row / sdpa  " + "  ".join(f"{n}: {r:.3f}" for n, r in ratio.items()))
    out = {}
    for mode, target in sides.items():
        logits = target.runner.forward(ids[CONTEXT : CONTEXT + 4], torch.arange(CONTEXT, CONTEXT + 4), CONTEXT)[0]
        out[mode] = logits.float()
    print(f"4-row logits, max |few-row - sdpa|: {(out['few-row'] - out['sdpa']).abs().max().item():.2e}")


if __name__ == "__main__":
    main()
