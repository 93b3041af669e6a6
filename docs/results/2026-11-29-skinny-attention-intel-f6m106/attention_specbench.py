"""Spec-Bench on eager shapes, ``weights="auto"`` as it prepares SmolLM2 here (every linear on the skinny GEMM), with
the attention on SDPA (``specdec_sdpa``, the default) against the few-row kernel (``specdec_sdpa_skinny``, asked for
with ``SPECDEC_ATTENTION=few-row``): vanilla, EAGLE-3 and the composite on each, one process, methods interleaved
per prompt (the order reversed every other prompt). Greedy: each method's tokens against its own side's vanilla and
against the SDPA side's.

    .venv/bin/python docs/results/2026-11-29-skinny-attention-intel-f6m106/attention_specbench.py [--per-family 3]
"""

import argparse
import os
import time

import torch

from specdec import HFTarget, SamplingParams, StopCondition, build_method, chat_ids
from specdec.assets import select_prompts, spec_bench_prompts
from specdec.backends.cpu import cpu_name
from specdec.models import load_smollm2

parser = argparse.ArgumentParser()
parser.add_argument("--per-family", type=int, default=3)
parser.add_argument("--new-tokens", type=int, default=96)
parser.add_argument("--methods", nargs="+", default=["vanilla", "eagle3", "composite"])
args = parser.parse_args()
torch.set_num_threads(2)
prompts = select_prompts(spec_bench_prompts(), args.per_family)
gens = {}
for side in ("sdpa", "few-row"):
    model, tok = load_smollm2()
    os.environ["SPECDEC_ATTENTION"] = side if side == "few-row" else "sdpa"  # read when the target is prepared
    longest = max(len(chat_ids(tok, p)) for p in prompts)
    target = HFTarget(model, max_len=longest + args.new_tokens + 72, static_shapes=False)
    print(f"cpu={cpu_name()} {side}: {target.execution.label}: {target.execution.describe()}", flush=True)
    for name in args.methods:
        gens[f"{side}/{name}"] = build_method(name, target)
stop = StopCondition(max_new_tokens=args.new_tokens)
greedy = SamplingParams(temperature=0.0)
for gen in gens.values():  # cost curves and first-call costs outside the timed runs
    gen.generate(chat_ids(tok, prompts[0]), greedy, StopCondition(max_new_tokens=8))
seconds, tokens, cycles, same, across = ({k: 0.0 for k in gens} for _ in range(5))
for i, prompt in enumerate(prompts):
    ids = chat_ids(tok, prompt)
    outs = {}
    for name in list(gens) if i % 2 == 0 else list(reversed(gens)):
        start = time.perf_counter()
        out = gens[name].generate(ids, greedy, stop)
        seconds[name] += time.perf_counter() - start
        tokens[name] += len(out.tokens)
        cycles[name] += max(out.metrics.cycles, 1)
        outs[name] = list(out.tokens)
    for name in gens:
        same[name] += outs[name] == outs[name.split("/")[0] + "/vanilla"]
        across[name] += outs[name] == outs["sdpa/" + name.split("/")[1]]
rate = {k: tokens[k] / seconds[k] for k in gens}
print(f"prompts={len(prompts)} new_tokens={args.new_tokens} T=0")
for name in gens:
    side, method = name.split("/")
    print(
        f"   {name:18s} {rate[name]:6.2f} tok/s  {rate[name] / rate[side + '/vanilla']:.3f}x own vanilla  "
        f"{rate[name] / rate['sdpa/' + method]:.3f}x its SDPA side  tau {tokens[name] / cycles[name]:.2f}  "
        f"same as its vanilla {int(same[name])}/{len(prompts)}, as its SDPA side {int(across[name])}/{len(prompts)}"
    )
