"""Same-process A/B: the committed BlockVerifier against the working tree's, alternated call by call, with a 600 MB
sweep before each call (the target forward's weight stream), 1-draw and 3-draw chains, V = 49152, q on 16k ids."""

import subprocess
import time
import types

import torch

from specdec.sampling import SamplingParams
from specdec.tree import DraftTree
from specdec.verify import BlockVerifier

torch.set_num_threads(2)
old_src = subprocess.run(
    ["git", "show", "HEAD:specdec/verify/block.py"], capture_output=True, text=True, check=True
).stdout
old = types.ModuleType("old_block")
exec(compile(old_src, "old_block.py", "exec"), old.__dict__)
V, Vd = 49152, 16384
g = torch.Generator().manual_seed(0)
big = torch.rand(150_000_000)
ids = torch.randperm(V, generator=g)[:Vd].sort().values


def case(n):
    logits = torch.randn(n, V, generator=g) * 3
    q = torch.zeros(n, V)
    q[: n - 1, ids] = torch.softmax(torch.randn(n - 1, Vd, generator=g) * 3, -1)
    tokens = torch.cat([torch.tensor([5]), ids[torch.randint(Vd, (n - 1,), generator=g)]])
    return DraftTree.from_parents(tokens, torch.arange(-1, n - 1), n - 1, q, torch.ones(n)), logits


sp = SamplingParams(temperature=1.0, seed=0)
vs = {"committed": old.BlockVerifier(), "new": BlockVerifier()}
for n in (2, 4):
    tree, logits = case(n)
    ts = {k: [] for k in vs}
    for _i in range(300):
        for k, v in vs.items():
            big.sum()
            s = time.perf_counter()
            v.verify(tree, logits, sp, g)
            ts[k].append(time.perf_counter() - s)
    med = {k: sorted(t[20:])[len(t[20:]) // 2] * 1e3 for k, t in ts.items()}
    print(
        f"N={n}: "
        + ", ".join(f"{k} {m:.3f} ms" for k, m in med.items())
        + f"  (new/committed {med['new'] / med['committed']:.2f})"
    )
