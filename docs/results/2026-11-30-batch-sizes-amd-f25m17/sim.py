"""What tree sizes could give a batch: cycles of ``logpools.py`` grouped into batches, against ``fwdcost.py``'s costs.

    python docs/results/2026-11-30-batch-sizes-amd-f25m17/sim.py [DRAFT_MS]

3000 random batches of B = 4 and 8 cycles from different prompts (seed 0). Each row's accepted tokens for a tree cut
from its logged 40-node tree (``logpools.py``: greedy acceptance is the accepted path's prefix inside the cut); a
cycle's cost is the batched forward of all rows' nodes (``fwdcost.txt``, interpolated) plus ``DRAFT_MS`` of drafting
(default 2: one head forward for the batch's root steps); "x vanilla" is tokens per ms against a step of B tokens.
Cuts: every row its ``m`` best nodes (any depth, or depth 1 only); the batch's ``K`` best nodes over all rows (raw
values; ragged rows, no padding); and ``K`` chosen per batch from the values (scaled by a calibration).
"""

import gzip
import json
import random
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
LOG = json.loads(gzip.decompress((HERE / "pools40.json.gz").read_bytes()))
#: batched forward ms by total rows (fwdcost.txt: B rows x n nodes)
COST = {
    4: {4: 44.6, 8: 47.1, 12: 50.4, 16: 59.4, 24: 73.0, 32: 87.7},
    8: {8: 52.1, 16: 65.1, 24: 83.4, 32: 95.5, 48: 137.1, 64: 154.0},
}
DRAFT = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0


def cost(batch: int, rows: float) -> float:
    xs = sorted(COST[batch])
    ys = [COST[batch][x] for x in xs]
    slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
    return float(np.interp(rows, xs, ys)) if rows <= xs[-1] else ys[-1] + (rows - xs[-1]) * slope


def accepted(c: dict, keep: set[int]) -> int:
    n = 0
    for node in c["path"][1:]:
        if node not in keep:
            break
        n += 1
    return n


def depths(c: dict) -> list[int]:
    d = [0] * len(c["par"])
    for i, p in enumerate(c["par"]):
        if p >= 0:
            d[i] = d[p] + 1
    return d


def best(c: dict, m: int, max_depth: int = 99) -> set[int]:
    d = depths(c)
    ok = [i for i in range(1, len(c["v"])) if d[i] <= max_depth]
    return {0, *sorted(ok, key=lambda i: -c["v"][i])[: m - 1]}


def report(label: str, batch: int, tau: float, cycle: float) -> None:
    print(f"  {label}: tau {tau:.2f}  cycle {cycle:.1f} ms  x vanilla {tau * cost(batch, batch) / cycle:.2f}")


rng = random.Random(0)
by_prompt: dict[int, list[dict]] = {}
for c in LOG:
    by_prompt.setdefault(c["p"], []).append(c)
for batch in (4, 8):
    groups = [[rng.choice(by_prompt[p]) for p in rng.sample(sorted(by_prompt), batch)] for _ in range(3000)]
    print(f"B={batch}: {len(LOG)} logged cycles; vanilla step {cost(batch, batch):.1f} ms; drafting {DRAFT} ms a cycle")
    for max_depth, label in ((99, "any depth"), (1, "depth 1")):
        for m in (2, 3, 4, 6):
            tau = np.mean([sum(1 + accepted(c, best(c, m, max_depth)) for c in g) for g in groups]) / batch
            report(f"every row m={m} ({label})", batch, tau, cost(batch, batch * m) + DRAFT)
    for k in (2, 4, 6, 8, 12):
        taus = []
        for g in groups:
            top = sorted(((v, r, i) for r, c in enumerate(g) for i, v in enumerate(c["v"]) if i), reverse=True)[:k]
            keeps = [{0} for _ in g]
            for _, r, i in top:
                keeps[r].add(i)
            taus.append(sum(1 + accepted(c, kept) for c, kept in zip(g, keeps, strict=True)))
        report(f"batch's best K={k}", batch, np.mean(taus) / batch, cost(batch, batch + k) + DRAFT)
    for scale in (0.7, 1.0):
        taus, cycles = [], []
        for g in groups:
            top = sorted(((v, r, i) for r, c in enumerate(g) for i, v in enumerate(c["v"]) if i), reverse=True)[:24]
            rate, chosen, value = batch / cost(batch, batch), 0, 0.0
            for k, (v, _, _) in enumerate(top, 1):
                value += scale * np.exp(v)
                if (batch + value) / (cost(batch, batch + k) + DRAFT) > rate:
                    rate, chosen = (batch + value) / (cost(batch, batch + k) + DRAFT), k
            keeps = [{0} for _ in g]
            for _, r, i in top[:chosen]:
                keeps[r].add(i)
            taus.append(sum(1 + accepted(c, kept) for c, kept in zip(g, keeps, strict=True)))
            cycles.append(cost(batch, batch + chosen) + (DRAFT if chosen else 0.0))
        report(f"batch's best K by value (x{scale})", batch, np.mean(taus) / batch, float(np.mean(cycles)))
