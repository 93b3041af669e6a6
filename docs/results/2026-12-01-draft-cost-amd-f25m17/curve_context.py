"""T(n)/T(1) of the target's tree forward at a short and a long context (the package sizes its cache to each)."""

import sys

import torch

from specdec import HFTarget
from specdec.backends.cpu import cpu_name
from specdec.budget import measure_forward_cost
from specdec.models import load_smollm2

torch.set_num_threads(2)
static = {"aot": "aot", "off": False}[sys.argv[1]]
model, tok = load_smollm2()
target = HFTarget(model, max_len=2048, weights="auto", static_shapes=static, in_place=True)
print(cpu_name(), target.execution.describe())
sizes = [1, 2, 4, 8, 16, 32]
for rnd in range(2):
    for context in (256, 1024):
        probe = target.sibling(max_len=context + max(sizes) + 1)
        curve = measure_forward_cost(probe, sizes=sizes, repeats=5, context=context, save=False)
        t1 = curve.seconds[0]
        print(
            f"round {rnd} context {context}: T(1) {t1 * 1e3:.1f} ms; "
            + ", ".join(f"{n}: {s / t1:.2f}" for n, s in zip(curve.sizes, curve.seconds, strict=True))
        )
