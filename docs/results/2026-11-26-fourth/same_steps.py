"""Token-weighted training accuracy of two runs over the same blocks of steps (same sequences, same order).

python docs/results/2026-11-26-fourth/same_steps.py A/log.jsonl B/log.jsonl [BLOCK]    # default blocks of 360
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def block_acc(log: list[dict], lo: int, hi: int, key: str) -> float | None:
    rows = [r for r in log[lo:hi] if key in r]
    tokens = sum(r["tokens"] for r in rows)
    return sum(r[key] * r["tokens"] for r in rows) / tokens if tokens else None


def main() -> None:
    a, b = ([json.loads(line) for line in Path(p).read_text().splitlines() if line] for p in sys.argv[1:3])
    block = int(sys.argv[3]) if len(sys.argv) > 3 else 360
    print("steps\tA acc_0\tB acc_0\tB acc_1\tB acc_2")
    for lo in range(0, min(len(a), len(b)), block):
        hi = lo + block
        cells = [block_acc(a, lo, hi, "acc_0")] + [block_acc(b, lo, hi, f"acc_{k}") for k in range(3)]
        print(f"{lo + 1}-{hi}\t" + "\t".join("-" if c is None else f"{c:.4f}" for c in cells))


if __name__ == "__main__":
    main()
