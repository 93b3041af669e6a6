"""Experiment: count the torch-function calls of one fast-path 1-token step by call site (a TorchFunctionMode)."""

import collections
import sys

import torch
from torch.overrides import TorchFunctionMode

from specdec.models import load_smollm2
from specdec.target import HFTarget

torch.set_num_threads(2)
model, _ = load_smollm2()
model.eval()
fast = HFTarget(model, 512, weights="auto")
ctx = 120
prompt = torch.randint(0, 49152, (ctx,), generator=torch.Generator().manual_seed(0))
fast.prefill(prompt)
c = collections.Counter()


class M(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        f = sys._getframe(1)
        while f and ("torch/" in f.f_code.co_filename and "site-packages/torch" in f.f_code.co_filename):
            f = f.f_back
        where = (
            f"{f.f_code.co_filename.split('site-packages/')[-1].split('/work/main/')[-1]}:{f.f_lineno}" if f else "?"
        )
        c[(getattr(func, "__name__", str(func)), where)] += 1
        return func(*args, **(kwargs or {}))


with torch.no_grad():
    fast.decode_one(torch.tensor(5))
    fast.length = ctx
    with M():
        fast.decode_one(torch.tensor(5))
        fast.length = ctx
print("total torch-function calls", sum(c.values()))
for (n, s), k in c.most_common(60):
    print(k, n, s)
