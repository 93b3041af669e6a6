"""Mixed plan + walk, the committed (8f347dd) closed form against the working tree's, on composite-like trees."""

import importlib.util
import statistics
import subprocess
import time

import torch

import specdec.verify.mixed as new
from specdec.sampling import SamplingParams
from specdec.tree import DraftTree
from specdec.verify.walk import walk

src = subprocess.run(
    ["git", "show", "8f347dd:specdec/verify/mixed.py"], capture_output=True, text=True, check=True
).stdout
spec = importlib.util.spec_from_loader("old_mixed", loader=None)
old = importlib.util.module_from_spec(spec)
exec(compile(src, "old_mixed", "exec"), old.__dict__)

torch.set_num_threads(2)
V = 49152
g = torch.Generator().manual_seed(0)
# r3d draws (root: 3 draws, nodes 1 and 2: one draw each) after a retrieval chain of 8 point masses from the root
chain = 8
parents = [-1] + [0] + list(range(1, chain)) + [0, 0, 0, chain + 1, chain + 2]
n = len(parents)
point = torch.tensor([False] + [True] * chain + [False] * 5)
tokens = torch.randint(V, (n,), generator=g)
q = torch.zeros(n, V)
q[0] = torch.softmax(torch.randn(V, generator=g) * 3, -1)
q[chain + 1] = torch.softmax(torch.randn(V, generator=g) * 3, -1)
q[chain + 2] = q[chain + 1]
tree = DraftTree.from_parents(tokens, torch.tensor(parents), 9, q, torch.ones(n), point_mass=point)
logits = torch.randn(n, V, generator=g) * 3
s = SamplingParams(temperature=1.0)
for mod in (old, new):  # warm-up
    v = mod.MixedMultiRoundVerifier()
    for _ in range(5):
        walk(tree, v.plan(tree, logits, s), g)
ts = {"8f347dd": [], "working tree": []}
for _ in range(50):
    for name, mod in (("8f347dd", old), ("working tree", new)):
        v = mod.MixedMultiRoundVerifier()
        t0 = time.perf_counter()
        walk(tree, v.plan(tree, logits, s), g)
        ts[name].append(time.perf_counter() - t0)
a = old.MixedMultiRoundVerifier().plan(tree, logits, s)
b = new.MixedMultiRoundVerifier().plan(tree, logits, s)
torch.testing.assert_close(a.accept_prob, b.accept_prob)
torch.testing.assert_close(a.residual_rows(), b.residual_rows())
print(f"tree: {n} nodes (8 point masses, 5 draws), V = {V}; same plan: yes")
for name, t in ts.items():
    print(f"{name}: plan + walk median {statistics.median(t) * 1e3:.2f} ms")
