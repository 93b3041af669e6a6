"""Eager forward cost curves in one process, two rounds: the eager fast path (weights auto) against stock weights with
every linear on specdec::skinny_linear; plus the linears' own time per forward on the skinny side."""

import collections
import time

import torch

from specdec import HFTarget
from specdec.backends import skinny
from specdec.budget import measure_forward_cost
from specdec.models import load_smollm2

torch.set_num_threads(2)
sizes = [1, 2, 4, 8, 16]
m1, _ = load_smollm2()
m2, _ = load_smollm2()
targets = {
    "eager auto": HFTarget(m1, max_len=512, static_shapes=False),
    "eager skinny": HFTarget(m2, max_len=512, static_shapes=False, weights="stock"),
}
print("swapped", skinny.skinny_linears(targets["eager skinny"].model))
spent = collections.Counter()
op = torch.ops.specdec.skinny_linear


def timed_forward(self, x):
    s = time.perf_counter()
    y = op(x, self.weight, self.bias)
    spent[x.reshape(-1, x.shape[-1]).shape[0]] += time.perf_counter() - s
    return y


for rnd in range(2):
    for label, t in targets.items():
        c = measure_forward_cost(t, sizes=sizes, repeats=7, save=False)
        s = c.seconds
        print(rnd, label, [f"{x * 1e3:.1f}" for x in s], f"T(8)/T(1) {s[3] / s[0]:.2f}", flush=True)
skinny.SkinnyLinear.forward = timed_forward
t = targets["eager skinny"]
t.reset()
t.prefill(torch.arange(256))
from specdec.budget import _flat_tree  # noqa: E402

g = torch.Generator().manual_seed(0)
for n in (1, 8):
    tree = _flat_tree(n, t.device, g, t.vocab_size)
    t.forward_tree(tree)
    spent.clear()
    start = time.perf_counter()
    for _ in range(10):
        t.forward_tree(tree)
    total = (time.perf_counter() - start) / 10
    print(f"{n} rows: forward {total * 1e3:.1f} ms, of which linears {spent[n] / 10 * 1e3:.1f} ms")
