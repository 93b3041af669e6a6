"""Forward cost curves in one process: the cached AOT package (stock GEMMs) against a package built from the same
model with every linear on specdec::skinny_linear (its own cache folder), and the eager path with and without."""

import os
import time

import torch

from specdec import HFTarget
from specdec.backends.skinny import skinny_linears
from specdec.budget import measure_forward_cost
from specdec.models import load_smollm2

torch.set_num_threads(2)
sizes = [1, 2, 4, 8, 16]
targets = {}
m1, _ = load_smollm2()
targets["package"] = HFTarget(m1, max_len=512, static_shapes="aot")
m2, _ = load_smollm2()
print("swapped", skinny_linears(m2), flush=True)
os.environ["SPECDEC_CACHE"] = "/tmp/skcache"
t0 = time.time()
targets["package+skinny"] = HFTarget(m2, max_len=512, static_shapes="aot", weights="stock")
targets["package+skinny"].prefill(torch.arange(5))
print("built/loaded in", round(time.time() - t0), "s", flush=True)
for rnd in range(2):
    for label, t in targets.items():
        c = measure_forward_cost(t, sizes=sizes, repeats=7, save=False)
        print(
            rnd,
            label,
            [f"{s * 1e3:.1f}" for s in c.seconds],
            f"T(8)/T(1) {c.seconds[3] / c.seconds[0]:.2f} T(16)/T(1) {c.seconds[4] / c.seconds[0]:.2f}",
            flush=True,
        )
