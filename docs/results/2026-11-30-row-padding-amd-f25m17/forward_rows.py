"""A tree forward's time against its rows, unpadded and with every packed linear padding fewer rows to ``--pad``.

    python docs/results/2026-11-30-row-padding-amd-f25m17/forward_rows.py [--pads 1 5 6] [--rounds 16]

SmolLM2-135M-Instruct (float32, ``weights="auto"`` with padding off, then each ``--pads`` value set on its packed
linears by hand), 300 tokens of context, flat trees of 1 to 16 nodes; every (pad, rows) pair timed once per round,
the order reversed every other round, the first round dropped; printed: the median per pair over the unpadded
1-token step, and that step's milliseconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

os.environ["SPECDEC_ROW_PADDING"] = "off"

from specdec import HFTarget  # noqa: E402
from specdec.backends.cpu import cpu_name  # noqa: E402
from specdec.backends.row_padding import set_pad_rows  # noqa: E402
from specdec.budget import _flat_tree  # noqa: E402
from specdec.models import load_smollm2  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pads", nargs="+", type=int, default=[1, 5, 6])
    parser.add_argument("--rounds", type=int, default=16)
    args = parser.parse_args()
    torch.set_num_threads(2)
    target = HFTarget(load_smollm2()[0], max_len=1024, weights="auto", in_place=True)
    print(f"cpu={cpu_name()}: {target.execution.describe()}")
    g = torch.Generator().manual_seed(0)
    sizes = list(range(1, 17))
    trees = {m: _flat_tree(m, torch.device("cpu"), g, target.vocab_size) for m in sizes}
    target.prefill(torch.randint(0, target.vocab_size, (300,), generator=g))
    pairs = [(p, m) for p in args.pads for m in sizes]
    times: dict[tuple[int, int], list[float]] = {pair: [] for pair in pairs}
    for r in range(args.rounds + 1):
        for pad, m in pairs if r % 2 else pairs[::-1]:
            set_pad_rows(target.model, pad)
            start = time.perf_counter()
            target.forward_tree(trees[m])
            if r:
                times[(pad, m)].append(time.perf_counter() - start)
    base = statistics.median(times[(args.pads[0], 1)])
    for pad in args.pads:
        row = " ".join(f"{m}:{statistics.median(times[(pad, m)]) / base:.3f}" for m in sizes)
        print(f"pad {pad}: {row}")
    print(f"(ratios to the pad-{args.pads[0]} 1-token step, {base * 1e3:.1f} ms)")


if __name__ == "__main__":
    main()
