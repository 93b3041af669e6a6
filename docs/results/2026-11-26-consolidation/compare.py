"""Before/after of the consolidation from before_after.sh's output folder: cycle_split per emitted token, the bench's
speed against its own vanilla (same run), and whether the T=0 tokens are the same before and after.

    python docs/results/2026-11-26-consolidation/compare.py OUT_DIR
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

out = Path(sys.argv[1])
print("cycle_split (EAGLE-3, 8 MT-bench questions, 64 tokens, T=0): ms per emitted token = cycle ms / tau")
for path in sorted(out.glob("cycle_split_*.txt")):
    line = path.read_text().splitlines()[-1]
    ms = sum(float(x) for x in re.findall(r"([0-9.]+) ms", line))
    tau = float(re.search(r"tau ([0-9.]+)", line).group(1))
    print(f"  {path.stem:24s} cycle {ms:6.2f} ms  tau {tau:.2f}  {ms / tau:6.2f} ms/token")


def rows(folder: str) -> list[dict]:
    lines = (out / folder / "results.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("status") == "ok"]


for pair in ("bench", "bench2"):
    if not (out / f"{pair}_after" / "results.jsonl").is_file():
        continue
    sides = {side: rows(f"{pair}_{side}") for side in ("before", "after")}
    print(f"\n{pair}: specdec bench (20 MT-bench questions, 64 tokens): summed tokens / summed wall time")
    for side, rs in sides.items():
        agg: dict[tuple, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
        for r in rs:
            a = agg[(r["method"], r["temperature"])]
            a[0] += r["new_tokens"]
            a[1] += r["time_total"]
            a[2] += r["cycles"] + 1
        for (method, t), (tokens, seconds, forwards) in sorted(agg.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            vanilla = agg[("vanilla", t)]
            ratio = (tokens / seconds) / (vanilla[0] / vanilla[1])
            print(
                f"  {side:6s} T={t:g} {method:8s} {tokens / seconds:6.2f} tok/s  tau {tokens / forwards:.2f}  "
                f"{ratio:.3f}x own vanilla"
            )
    tokens = {
        side: {(r["prompt_id"], r["method"]): r["tokens"] for r in rs if r["temperature"] == 0}
        for side, rs in sides.items()
    }
    common = sorted(set(tokens["before"]) & set(tokens["after"]))
    same = sum(tokens["before"][k] == tokens["after"][k] for k in common)
    print(f"  T=0 tokens identical before and after: {same} of {len(common)} generations")
