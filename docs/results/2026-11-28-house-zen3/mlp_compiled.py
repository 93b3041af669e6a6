"""Experiment: each decoder layer's MLP compiled (frozen weights, max-autotune: inductor's CPP GEMM template) inside
the eager fast path; step and tree forwards against the eager fast path, interleaved in one process."""

import statistics
import sys
import time
import types

import torch
import torch._inductor.config as ic
import torch.nn.functional as F
from torch import nn

from specdec.models import load_smollm2
from specdec.target import HFTarget
from specdec.tree import DraftTree

torch.set_num_threads(2)
torch._dynamo.config.recompile_limit = 64
torch._dynamo.config.cache_size_limit = 64
ic.freezing = True
ic.max_autotune_gemm_backends = "CPP,ATEN"
model, _ = load_smollm2()
model.eval()
fast = HFTarget(model, 512, weights="auto")
exp = HFTarget(model, 512, weights="auto")
ROWS = [int(a) for a in sys.argv[1:]] or [1, 8]
DYN = False


class DenseMLP(nn.Module):
    def __init__(self, mlp):
        super().__init__()
        gu = torch.cat([mlp.gate_proj.weight.detach(), mlp.up_proj.weight.detach()]).contiguous()
        self.gu = nn.Parameter(gu, requires_grad=False)
        self.d = nn.Parameter(mlp.down_proj.weight.detach().clone().contiguous(), requires_grad=False)
        self.i = mlp.down_proj.in_features

    def forward(self, x):
        h = F.linear(x, self.gu)
        return F.linear(F.silu(h[..., : self.i]) * h[..., self.i :], self.d)


class CompiledMLP(nn.Module):
    count = 0

    def __init__(self, mlp):
        super().__init__()
        self.eager = mlp
        dense = DenseMLP(mlp)
        CompiledMLP.count += 1
        f = DenseMLP.forward
        code = f.__code__.replace(co_name=f"mlp{CompiledMLP.count}")
        fn = types.FunctionType(code, f.__globals__, code.co_name, f.__defaults__, f.__closure__)
        dense.forward = types.MethodType(fn, dense)
        self.dense = dense
        with ic.patch(freezing=True, max_autotune_gemm_backends="CPP,ATEN"):
            self.fn = torch.compile(dense, mode="max-autotune-no-cudagraphs", dynamic=DYN)

    def forward(self, x):
        if x.shape[1] not in ROWS:
            return self.eager(x)
        return self.fn(x)


t0 = time.perf_counter()
ref_out = {}
for layer in exp.model.model.layers:
    layer.mlp = CompiledMLP(layer.mlp)
# warm: compile per row count
with torch.no_grad():
    for i, layer in enumerate(exp.model.model.layers):
        for n in ROWS:
            x = torch.randn(1, n, 576)
            y = layer.mlp(x)
            if i == 0:
                print("rows", n, "max diff vs eager", (y - layer.mlp.dense(x)).abs().max().item(), flush=True)
print("compile", round(time.perf_counter() - t0, 1), "s", flush=True)

ctx = 120
g = torch.Generator().manual_seed(0)
prompt = torch.randint(0, 49152, (ctx,), generator=g)


def chain(n):
    return DraftTree.from_parents(torch.randint(0, 49152, (n,), generator=g), torch.arange(-1, n - 1), n - 1)


trees = {n: chain(n) for n in ROWS if n > 1}
sides = {"fast": fast, "mlpc": exp}
for t in sides.values():
    t.prefill(prompt)
    for tr in trees.values():
        t.forward_tree(tr)
    t.decode_one(torch.tensor(5))
    t.length = ctx
times = {k: {n: [] for n in ["step", *trees]} for k in sides}
with torch.no_grad():
    for _r in range(16):
        for name, t in sides.items():
            t0 = time.perf_counter()
            t.decode_one(torch.tensor(5))
            times[name]["step"].append(time.perf_counter() - t0)
            t.length = ctx
            for n, tr in trees.items():
                t0 = time.perf_counter()
                t.forward_tree(tr)
                times[name][n].append(time.perf_counter() - t0)
for name, d in times.items():
    print(name, " ".join(f"{k}={statistics.median(v[2:]) * 1e3:.1f}ms" for k, v in d.items()))
