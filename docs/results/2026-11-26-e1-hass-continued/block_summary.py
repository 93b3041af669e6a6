"""Token-weighted accuracy and loss per block of training steps, from a ``specdec train`` run's ``log.jsonl``.

    python docs/results/2026-11-26-e1-hass-continued/block_summary.py RUN/log.jsonl [--blocks 10]

On data the head has not seen before (one epoch over a new window) each step's accuracy is a held-out figure, so
the blocks show whether the head is still learning at this data size.
"""

from __future__ import annotations

import argparse
import json


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("log")
    p.add_argument("--blocks", type=int, default=10)
    args = p.parse_args()
    with open(args.log) as f:
        rows = [r for r in map(json.loads, f) if "acc_0" in r]
    keys = sorted(k for k in rows[0] if k.startswith(("acc_", "loss_")))
    size = -(-len(rows) // args.blocks)
    print("steps\tscored\t" + "\t".join(keys) + "\twall_s_end  (token-weighted means over each block; from log.jsonl)")
    for start in range(0, len(rows), size):
        block = rows[start : start + size]
        n = sum(r["tokens"] for r in block)
        means = [sum(r[k] * r["tokens"] for r in block) / n for k in keys]
        cells = "\t".join(f"{m:.4f}" for m in means)
        print(f"{block[0]['step']}-{block[-1]['step']}\t{n:.0f}\t{cells}\t{block[-1]['wall_s']:.1f}")


if __name__ == "__main__":
    main()
