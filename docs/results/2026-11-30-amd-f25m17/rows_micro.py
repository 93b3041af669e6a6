"""Packed (oneDNN) against the skinny kernel per row count on SmolLM2's linear shapes, cold weights, and summed per
forward (30 layers, the stacked q/k/v and gate/up groups, the vocabulary projection).

    OMP_NUM_THREADS=2 .venv/bin/python docs/results/2026-11-30-amd-f25m17/rows_micro.py
"""

import statistics

import torch

from specdec.backends.kernel_times import sides, time_shape

torch.set_num_threads(2)
g = torch.Generator().manual_seed(0)
# shape -> how many of it one forward runs (q/k/v and gate/up stacked: 576x960, 576x3072)
per_forward = {
    (576, 192, False): 0,
    (576, 576, False): 30,
    (576, 960, False): 30,
    (576, 1536, False): 0,
    (576, 3072, False): 30,
    (1536, 576, False): 30,
    (576, 49152, False): 1,
}
rows = (1, 2, 4, 8, 16, 32)
tot = {k: dict.fromkeys(rows, 0.0) for k in ("packed", "skinny")}
for s, count in per_forward.items():
    t = time_shape(sides(s, torch.float32, g, kernels=("packed", "skinny")), rows=rows)
    line = f"{s[0]}x{s[1]:<6d}"
    for k in ("packed", "skinny"):
        ms = [statistics.median(t[k][n]) * 1e3 for n in rows]
        for n, m in zip(rows, ms, strict=True):
            tot[k][n] += count * m
        line += f"  {k}: " + " ".join(f"{m:6.3f}" for m in ms)
    print(line, flush=True)
print("model (stacked groups, 30 layers): ms per forward's linears")
for k, by_rows in tot.items():
    print(k, " ".join(f"{n}:{v:.2f}" for n, v in by_rows.items()))
