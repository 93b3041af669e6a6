"""The per-cycle steps alone, hot (inputs reused, 2 threads): the verification plan of an ``r3d`` tree at T = 1
(``[6, 49152]`` float32, the root's three draws, two one-child nodes) with the row the walk samples, and the draws
(``sample`` of one 49152 row, ``sample_distinct`` of three from each of three 16384 rows) and top-p's cut (``warp`` of
six 49152 rows at T = 0.7, top-p 0.9), tensor form against native form. Medians of 7 repeats of 200 calls.

    .venv/bin/python docs/results/2026-11-30-native-steps-intel-f6m106/native_micro.py
"""

import os
import statistics
import time

import torch

from specdec.backends.cpu import cpu_name
from specdec.sampling import SamplingParams, sample, sample_distinct, warp
from specdec.tree import DraftTree
from specdec.verify.mixed import mixed_multiround_plan
from specdec.verify.native import native_plan
from specdec.verify.stochastic import stochastic_multiround_plan

torch.set_num_threads(2)
g = torch.Generator().manual_seed(0)
V = 49152
tree_parents = torch.tensor([-1, 0, 0, 0, 1, 2])
p = torch.softmax(torch.randn(6, V, generator=g) * 3, -1)
q = torch.zeros(6, V)
q[:3] = torch.softmax(torch.randn(3, V, generator=g) * 3, -1)
tokens = torch.cat([torch.tensor([0]), q[0].topk(3).indices, q[1].topk(1).indices, q[2].topk(1).indices])
tree = DraftTree.from_parents(tokens, tree_parents, 2, q, torch.ones(6))
points = torch.zeros(6, dtype=torch.bool)
node = torch.tensor(0)
row, rows = torch.softmax(torch.randn(1, V, generator=g), -1), torch.softmax(torch.randn(3, 16384, generator=g) * 3, -1)
logits = torch.randn(6, V, generator=g) * 3  # a tree's target logits, about as peaked as SmolLM2's
nucleus = SamplingParams(temperature=0.7, top_p=0.9)
CASES = {
    "plan + residual row, stochastic": lambda: stochastic_multiround_plan(tree, p, q, 3).residual_at(node),
    "plan + residual row, mixed": lambda: mixed_multiround_plan(tree, p, q, points, 3).residual_at(node),
    "plan + residual row, native": lambda: native_plan(tree, p, q, points, 3).residual_at(node),
    "sample, 1 x 49152": lambda: sample(row, g),
    "sample_distinct, 3 x 16384, k = 3": lambda: sample_distinct(rows, 3, g),
    "warp, 6 x 49152, T = 0.7, top-p 0.9": lambda: warp(logits, nucleus),
}


def median_us(fn) -> float:
    for _ in range(20):
        fn()
    runs = []
    for _ in range(7):
        t = time.perf_counter()
        for _ in range(200):
            fn()
        runs.append((time.perf_counter() - t) / 200 * 1e6)
    return statistics.median(runs)


print(f"cpu={cpu_name()} threads=2 torch {torch.__version__}")
print("| step | form | us per call |")
print("| --- | --- | --- |")
for name, fn in CASES.items():
    forms = {"native": "auto"} if name.endswith("native") else {"tensor": "off", "native": "auto"}
    if name.startswith("plan"):
        forms = {"native" if name.endswith("native") else "tensor": "auto" if name.endswith("native") else "off"}
    for form, switch in forms.items():
        os.environ["SPECDEC_SKINNY"] = switch
        print(f"| {name} | {form} | {median_us(fn):.0f} |", flush=True)
