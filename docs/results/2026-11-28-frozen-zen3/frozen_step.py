"""Experiment script (not part of the suite): the eager fast path against the static-shape path as shipped (weights
frozen, GEMMs tuned unless SPECDEC_TUNE_GEMMS=0), and HF's own 1-token step, in one process, interleaved.

    python docs/results/2026-11-28-frozen-zen3/frozen_step.py

Prints each side's compile (warm) time, the logits' largest difference to the eager path per tree size, and the
medians of 14 rounds: 1-token step, trees of 1, 8 and 16 tokens (chains), the step over HF's and T(n) over the step.
Context 120 tokens, capacity 512, buckets 1/8/16.
"""

import resource
import statistics
import time

import torch
from transformers import DynamicCache

from specdec.models import load_smollm2
from specdec.target import HFTarget
from specdec.tree import DraftTree

torch.set_num_threads(2)
model, _ = load_smollm2()
model.eval()
sides = {"eager": HFTarget(model, 512, weights="auto")}
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
sides["static"] = HFTarget(model, 512, static_shapes=True, buckets=(1, 8, 16))
ctx = 120
g = torch.Generator().manual_seed(0)
prompt = torch.randint(0, 49152, (ctx,), generator=g)


def chain(n):
    return DraftTree.from_parents(torch.randint(0, 49152, (n,), generator=g), torch.arange(-1, n - 1), n - 1)


trees = {n: chain(n) for n in (1, 8, 16)}
outs: dict = {}
for name, t in sides.items():
    t0 = time.perf_counter()
    t.prefill(prompt)
    for n, tr in trees.items():
        outs.setdefault(n, []).append(t.forward_tree(tr).logits)
    t.decode_one(torch.tensor(5))
    t.length = ctx
    print(name, "warm", round(time.perf_counter() - t0, 1), "s", flush=True)
rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(f"peak RSS grew {(rss1 - rss0) / 2**20:.2f} GiB while compiling the static side")
for n, (a, b) in outs.items():
    same = bool((a.argmax(-1) == b.argmax(-1)).all())
    print(f"tree {n}: largest logit difference {(a - b).abs().max().item():.2e}, same argmax {same}")
hf = DynamicCache(config=model.config)
with torch.no_grad():
    model(input_ids=prompt[None], use_cache=True, past_key_values=hf)
times = {k: {n: [] for n in ["step", 1, 8, 16]} for k in sides}
times["hf"] = {"step": []}
with torch.no_grad():
    for _ in range(16):
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
hf_ms = statistics.median(times["hf"]["step"][2:]) * 1e3
for name, d in times.items():
    med = {k: statistics.median(v[2:]) * 1e3 for k, v in d.items()}
    line = " ".join(f"{k}={v:.1f}ms" for k, v in med.items())
    if 8 in med:
        s = med["step"]
        line += f"  step/HF={s / hf_ms:.3f} T8/T1={med[8] / s:.2f} T16/T1={med[16] / s:.2f}"
    print(name, line, flush=True)
