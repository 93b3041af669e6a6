"""Same kernels (SDPA, the rule's packed linears), different cost curves handed to the adaptive trees: how much of an
A/B between two backends can come from their curves alone (each side measures its own, on a noisy machine).

    .venv/bin/python docs/results/2026-11-30-attention-amd-f25m17/curve_ab.py [PER_FAMILY]

The two curves cached on this machine for SmolLM2 at 2 threads (``packed``: the SDPA side's, ``packed+attention``:
the few-row side's, as the morning's runs measured them), and each at half its level (the same shape). EAGLE-3 and
the composite built once per curve on one target, Spec-Bench ``PER_FAMILY`` questions per family, 96 tokens, T = 0,
every generator per prompt back to back in alternating order.
"""

import json
import sys
import time

import torch

import specdec.budget as budget
from specdec import HFTarget, SamplingParams, StopCondition, build_method, chat_ids
from specdec.assets import select_prompts, spec_bench_prompts
from specdec.budget import CostCurve
from specdec.models import cache_dir, load_smollm2

torch.set_num_threads(2)
found = {
    name: CostCurve.from_json(json.loads(next((cache_dir() / "budget").glob(f"*-cpu-2-{label}.json")).read_text()))
    for name, label in (("flat", "packed"), ("steep", "packed+attention"))
}
curves = dict(found)
for name, c in found.items():
    curves[f"{name}/2"] = CostCurve(c.sizes, tuple(s / 2 for s in c.seconds), {})  # same shape, half the level
for k, c in curves.items():
    print(k, " ".join(f"{m}:{c.cost(m) * 1e3:.1f}" for m in (1, 4, 8, 16, 32)))
prompts = select_prompts(spec_bench_prompts(), int(sys.argv[1]) if len(sys.argv) > 1 else 3)
model, tok = load_smollm2()
longest = max(len(chat_ids(tok, p)) for p in prompts)
target = HFTarget(model, max_len=longest + 96 + 72, static_shapes=False)
gens = {"vanilla": build_method("vanilla", target)}
measured = budget.forward_cost_curve
for name, curve in curves.items():
    budget.forward_cost_curve = lambda t, curve=curve: curve  # read by build_method's tree policies
    for m in ("eagle3", "composite"):
        gens[f"{m}/{name}"] = build_method(m, target)
budget.forward_cost_curve = measured
stop, s = StopCondition(max_new_tokens=96), SamplingParams(temperature=0.0)
for g in gens.values():
    g.generate(chat_ids(tok, prompts[0]), s, StopCondition(max_new_tokens=8))
secs, toks, cyc, nodes = ({k: 0.0 for k in gens} for _ in range(4))
for i, p in enumerate(prompts):
    ids = chat_ids(tok, p)
    for k in list(gens) if i % 2 == 0 else list(reversed(gens)):
        t0 = time.perf_counter()
        out = gens[k].generate(ids, s, stop)
        secs[k] += time.perf_counter() - t0
        toks[k] += len(out.tokens)
        cyc[k] += out.metrics.cycles
        nodes[k] += sum(out.metrics.tree_sizes)
    print(" ", p.id, "done", flush=True)
v = toks["vanilla"] / secs["vanilla"]
for k in gens:
    rate = toks[k] / secs[k]
    print(
        f"{k:18s} {rate:6.2f} tok/s {rate / v:.3f}x vanilla tau {toks[k] / max(cyc[k], 1):.2f} "
        f"nodes {nodes[k] / max(cyc[k], 1):.1f}"
    )
