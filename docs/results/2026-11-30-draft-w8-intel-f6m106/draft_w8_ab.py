"""EAGLE-3 and the composite with their draft heads' int8 linears on fbgemm's dynamic int8 GEMM (``Int8Linear``, the
rule and the code before), on the measured choice per shape (``draft_int8_linear``, the new default), and all on the
int8-weight skinny kernel (``W8Linear``), beside vanilla, on the same target in one process; methods interleaved per
prompt, the order rotated. Prints tok/s, tau, draft ms per cycle and the ratio to vanilla; greedy rows are checked
against vanilla's tokens.

    .venv/bin/python docs/results/2026-11-30-draft-w8-intel-f6m106/draft_w8_ab.py [--prompts 16] [--new-tokens 96]
        [--temperature 0] [--methods eagle3 composite] [--dataset mtbench|spec-bench]
"""

import argparse
import statistics
from unittest import mock

import torch

from specdec import HFTarget, SamplingParams, StopCondition, build_method, chat_ids
from specdec.assets import mtbench_prompts, spec_bench_prompts
from specdec.backends.cpu import cpu_name
from specdec.backends.kernels import Int8Linear
from specdec.backends.skinny import W8Linear
from specdec.methods import MethodOptions
from specdec.models import load_smollm2

parser = argparse.ArgumentParser()
parser.add_argument("--prompts", type=int, default=16)
parser.add_argument("--new-tokens", type=int, default=96)
parser.add_argument("--temperature", type=float, default=0.0)
parser.add_argument("--top-p", type=float, default=1.0)
parser.add_argument("--methods", nargs="+", default=["eagle3", "composite"])
parser.add_argument("--dataset", default="mtbench", choices=["mtbench", "spec-bench"])
parser.add_argument("--static-shapes", default="auto", choices=["auto", "off"])
parser.add_argument("--seed", type=int, default=0, help="the sampling seed of every call (T > 0)")
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
target = HFTarget(model, max_len=2048, static_shapes=False if args.static_shapes == "off" else "auto")
print(f"cpu={cpu_name()} threads=2 {target.execution.label}: {target.execution.describe()}", flush=True)

factories = {
    "fbgemm": lambda linear, keep_weight=True: Int8Linear(linear, keep_weight=keep_weight),
    "measured": None,  # the library's default
    "all-w8": lambda linear, keep_weight=True: W8Linear(linear, keep_weight=keep_weight),
}
gens = {"vanilla": build_method("vanilla", target)}
for method in args.methods:
    for side, factory in factories.items():
        patches = (
            []
            if factory is None
            else [
                mock.patch("specdec.drafters.eagle.draft_int8_linear", factory),
                mock.patch("specdec.drafters.eagle1.draft_int8_linear", factory),
            ]
        )
        for p in patches:
            p.start()
        gens[f"{method} {side}"] = build_method(method, target, MethodOptions(draft_weights="int8"))
        for p in patches:
            p.stop()
        head = gens[f"{method} {side}"].drafter.batch_part()  # a composite's EAGLE part
        kinds = sorted({type(m).__name__ for m in head.head.modules() if "Linear" in type(m).__name__})
        print(f"  {method} {side}: {kinds}", flush=True)
sampling = SamplingParams(temperature=args.temperature, top_p=args.top_p, seed=args.seed)
stop = StopCondition(max_new_tokens=args.new_tokens)
for gen in gens.values():  # first-call costs and cost curves outside the timed runs
    gen.generate(ids[0], sampling, StopCondition(max_new_tokens=8))
names = list(gens)
stats = {n: {"tokens": 0, "seconds": 0.0, "tau": [], "draft": [], "cycles": 0} for n in names}
vanilla_tokens = []
for i, x in enumerate(ids):
    order = names[i % len(names) :] + names[: i % len(names)]
    for name in order:
        r = gens[name].generate(x, sampling, stop)
        s, m = stats[name], r.metrics
        s["tokens"] += m.new_tokens
        s["seconds"] += m.time_total
        s["tau"].append(m.tau)
        s["draft"].append(m.time_draft)
        s["cycles"] += m.cycles
        if name == "vanilla":
            vanilla_tokens.append(r.tokens)
        elif args.temperature == 0:
            assert r.tokens == vanilla_tokens[-1] if order.index(name) > order.index("vanilla") else True
print(f"{len(ids)} {args.dataset} prompts x {args.new_tokens} tokens, T={args.temperature}, top-p {args.top_p}", end="")
print(f", seed {args.seed}")
base = stats["vanilla"]["tokens"] / stats["vanilla"]["seconds"]
print("| side | tok/s | x vanilla | tau | draft ms per cycle |")
print("| --- | --- | --- | --- | --- |")
for name in names:
    s = stats[name]
    rate = s["tokens"] / s["seconds"]
    draft = 1e3 * sum(s["draft"]) / max(1, s["cycles"])
    print(f"| {name} | {rate:.2f} | {rate / base:.3f}x | {statistics.mean(s['tau']):.3f} | {draft:.2f} |")
