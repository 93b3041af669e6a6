"""Forward cost curves in one process: the cached AOT package (stock GEMMs) against a package built from the same
model with every linear on specdec::skinny_linear called through its C shim (own cache folder)."""

import os
import time

import torch

import specdec.backends.aot as aot
import specdec.backends.compiled as compiled
from specdec import HFTarget
from specdec.backends import skinny
from specdec.budget import measure_forward_cost
from specdec.models import load_smollm2

torch.set_num_threads(2)
sizes = [1, 2, 4, 8, 16]
targets = {}
m1, _ = load_smollm2()
targets["package"] = HFTarget(m1, max_len=512, static_shapes="aot")
targets["package"].prefill(torch.arange(5))
m2, _ = load_smollm2()
print("swapped", skinny.skinny_linears(m2), flush=True)
base = compiled.cpu_options


def options():
    return {**base(), **skinny.package_options()}


aot.cpu_options = options
aot._machine_digest = lambda dtype: "skinnyshim"  # its own cache folder; the options hold an OpOverload (no JSON)
os.environ["SPECDEC_CACHE"] = "/tmp/skshim"
t0 = time.time()
targets["package+skinny"] = HFTarget(m2, max_len=512, static_shapes="aot", weights="stock")
targets["package+skinny"].prefill(torch.arange(5))
print("built/loaded in", round(time.time() - t0), "s", flush=True)
for rnd in range(3):
    for label, t in targets.items():
        c = measure_forward_cost(t, sizes=sizes, repeats=7, save=False)
        s = c.seconds
        print(
            rnd,
            label,
            [f"{x * 1e3:.1f}" for x in s],
            f"T(8)/T(1) {s[3] / s[0]:.2f} T(16)/T(1) {s[4] / s[0]:.2f}",
            flush=True,
        )
