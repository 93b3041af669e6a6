"""The small per-cycle steps of sampling in their tensor form (``SPECDEC_SKINNY=off`` while generating: the code
before) against their native form (``specdec.backends.native``: the sampled tree's verification plan and the
inverse-CDF draws), for vanilla, EAGLE-3 and the composite on one target in one process. Every generator is built
once (the switch only moves the per-cycle steps, which read it at each call); runs interleaved per prompt, the
order rotated; every call uses the same sampling seed, so both forms read the same random numbers. Prints tok/s,
the ratio to vanilla's tensor form, tau and the draft / verify milliseconds per cycle.

    .venv/bin/python docs/results/2026-11-30-native-steps-intel-f6m106/native_steps_ab.py [--prompts 12]
        [--new-tokens 96] [--temperature 1] [--top-p 1] [--methods vanilla eagle3 composite]
        [--dataset mtbench|spec-bench] [--seed 0]
"""

import argparse
import os
import statistics

import torch

from specdec import HFTarget, SamplingParams, StopCondition, build_method, chat_ids
from specdec.assets import mtbench_prompts, spec_bench_prompts
from specdec.backends.cpu import cpu_name
from specdec.models import load_smollm2

parser = argparse.ArgumentParser()
parser.add_argument("--prompts", type=int, default=12)
parser.add_argument("--new-tokens", type=int, default=96)
parser.add_argument("--temperature", type=float, default=1.0)
parser.add_argument("--top-p", type=float, default=1.0)
parser.add_argument("--methods", nargs="+", default=["vanilla", "eagle3", "composite"])
parser.add_argument("--dataset", default="mtbench", choices=["mtbench", "spec-bench"])
parser.add_argument("--seed", type=int, default=0, help="the sampling seed of every call")
args = parser.parse_args()
torch.set_num_threads(2)
model, tok = load_smollm2()
if args.dataset == "mtbench":
    texts = [p.text for p in mtbench_prompts()[: args.prompts]]
else:  # the first prompts of each Spec-Bench family
    families: dict = {}
    for p in spec_bench_prompts():
        families.setdefault(p.family, []).append(p.text)
    texts = [t for family in families.values() for t in family[: max(1, args.prompts // len(families))]]
ids = [chat_ids(tok, t).tolist() for t in texts]
target = HFTarget(model, max_len=2048, static_shapes="auto")
print(f"cpu={cpu_name()} threads=2 {target.execution.label}: {target.execution.describe()}", flush=True)
gens = {m: build_method(m, target) for m in args.methods}
sampling = SamplingParams(temperature=args.temperature, top_p=args.top_p, seed=args.seed)
stop = StopCondition(max_new_tokens=args.new_tokens)
SIDES = {"tensor": "off", "native": "auto"}
for side in SIDES.values():  # first-call costs and cost curves outside the timed runs
    os.environ["SPECDEC_SKINNY"] = side
    for gen in gens.values():
        gen.generate(ids[0], sampling, StopCondition(max_new_tokens=8))
names = [(m, s) for m in args.methods for s in SIDES]
stats = {n: {"tokens": 0, "seconds": 0.0, "tau": [], "draft": 0.0, "verify": 0.0, "cycles": 0} for n in names}
same = 0
for i, x in enumerate(ids):
    order = names[i % len(names) :] + names[: i % len(names)]
    out = {}
    for name in order:
        os.environ["SPECDEC_SKINNY"] = SIDES[name[1]]
        r = gens[name[0]].generate(x, sampling, stop)
        s, m = stats[name], r.metrics
        s["tokens"] += m.new_tokens
        s["seconds"] += m.time_total
        s["tau"].append(m.tau)
        s["draft"] += m.time_draft
        s["verify"] += m.time_verify
        s["cycles"] += m.cycles
        out[name] = r.tokens
    same += sum(out[(m, "tensor")] == out[(m, "native")] for m in args.methods)
os.environ["SPECDEC_SKINNY"] = "auto"
print(f"{len(ids)} {args.dataset} prompts x {args.new_tokens} tokens, T={args.temperature}, top-p {args.top_p}", end="")
print(f", seed {args.seed}; the two forms gave the same tokens in {same} of {len(ids) * len(args.methods)} runs")
base = stats[(args.methods[0], "tensor")]
base = base["tokens"] / base["seconds"]
print(f"| method | form | tok/s | x {args.methods[0]} (tensor) | native / tensor | tau | draft ms | verify ms |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for method, side in names:
    s = stats[(method, side)]
    rate = s["tokens"] / s["seconds"]
    t = stats[(method, "tensor")]
    gain = f"{rate / (t['tokens'] / t['seconds']):.3f}x" if side == "native" else ""
    ms = {k: 1e3 * s[k] / max(1, s["cycles"]) for k in ("draft", "verify")}
    print(
        f"| {method} | {side} | {rate:.2f} | {rate / base:.3f}x | {gain} | {statistics.mean(s['tau']):.3f} "
        f"| {ms['draft']:.2f} | {ms['verify']:.2f} |"
    )
