"""Experiment (not a benchmark of the suite): our eager fast path against static shapes compiled other ways, and
HF's 1-token step, in one process. Sides by argv: none, sp (packed linears under torch.compile), frozen (the static
path as shipped), ma (static, frozen weights, max_autotune: inductor's GEMM template). Run from the repository root."""

import statistics
import sys
import time

import torch
from transformers import DynamicCache

from specdec.backends.kernels import pack_linears
from specdec.models import load_smollm2
from specdec.target import HFTarget
from specdec.tree import DraftTree

torch.set_num_threads(2)
model, _ = load_smollm2()
model.eval()
sides = {"fast": HFTarget(model, 512, weights="auto")}
which = sys.argv[1:] or ["sp"]
if "frozen" in which:
    sides["frozen"] = HFTarget(model, 512, weights="stock", static_shapes=True)
if "sp" in which:
    sp = HFTarget(model, 512, weights="stock", static_shapes=True)
    pack_linears(sp.model)
    import os

    sp.runner._run = torch.compile(
        sp.model, fullgraph=True, dynamic=False, backend=os.environ.get("BACKEND", "inductor")
    )
    sides["sp"] = sp
if "ma" in which:
    torch._dynamo.config.recompile_limit = 64
    ma = HFTarget(model, 512, weights="stock", static_shapes=True, buckets=(1, 8, 16))
    ma.runner._run = torch.compile(
        ma.model, fullgraph=True, dynamic=False, options={"freezing": True, "max_autotune": True}
    )
    sides["ma"] = ma
ctx = 120
g = torch.Generator().manual_seed(0)
prompt = torch.randint(0, 49152, (ctx,), generator=g)


def chain(n):
    return DraftTree.from_parents(torch.randint(0, 49152, (n,), generator=g), torch.arange(-1, n - 1), n - 1)


trees = {n: chain(n) for n in (1, 8, 16)}
for name, t in sides.items():
    t0 = time.perf_counter()
    t.prefill(prompt)
    for tr in trees.values():
        t.forward_tree(tr)
    t.decode_one(torch.tensor(5))
    t.length = ctx
    print(name, "warm", round(time.perf_counter() - t0, 1), "s", flush=True)
hf = DynamicCache(config=model.config)
with torch.no_grad():
    model(input_ids=prompt[None], use_cache=True, past_key_values=hf)
times = {k: {n: [] for n in ["step", 1, 8, 16]} for k in sides}
times["hf"] = {"step": []}
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
        t0 = time.perf_counter()
        model(input_ids=torch.tensor([[5]]), use_cache=True, past_key_values=hf)
        times["hf"]["step"].append(time.perf_counter() - t0)
        hf.crop(-1)
for name, d in times.items():
    med = {k: statistics.median(v[2:]) * 1e3 for k, v in d.items()}
    line = " ".join(f"{k}={v:.1f}ms" for k, v in med.items())
    if "step" in med and 8 in med:
        hf_ms = statistics.median(times["hf"]["step"][2:]) * 1e3
        line += f"  step/hf={med['step'] / hf_ms:.3f} T8/T1={med[8] / med[1]:.2f} T16/T1={med[16] / med[1]:.2f}"
    print(name, line, flush=True)
