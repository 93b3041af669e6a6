"""EAGLE-3 on the package path: the deferred budget (previous cycle's values) against level-by-level drafting.

    python docs/results/2026-11-28-aot-zen3/deferred_ab.py [--prompts 8] [--new-tokens 64]

One SmolLM2 target from its ahead-of-time package; vanilla and EAGLE-3 with ``deferred_budget`` on and off, run
alternately prompt by prompt on MT-bench questions at T = 0; prints tokens/s, tau and each over vanilla.
"""

import argparse
import time

import torch

from specdec.assets import chat_ids, mtbench_prompts
from specdec.generate import StopCondition
from specdec.methods import MethodOptions, build_method
from specdec.models import load_smollm2
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.warm import warm_up

parser = argparse.ArgumentParser()
parser.add_argument("--prompts", type=int, default=8)
parser.add_argument("--new-tokens", type=int, default=64)
args = parser.parse_args()
torch.set_num_threads(2)
model, tokenizer = load_smollm2()
target = HFTarget(model, max_len=512, static_shapes="aot")
greedy, stop = SamplingParams(temperature=0.0), StopCondition(max_new_tokens=args.new_tokens)
gens = {
    "vanilla": build_method("vanilla", target),
    "eagle3 deferred": build_method("eagle3", target, MethodOptions(deferred_budget=True)),
    "eagle3 by level": build_method("eagle3", target, MethodOptions(deferred_budget=False)),
}
ids = [chat_ids(tokenizer, p) for p in mtbench_prompts()[: args.prompts]]
for gen in gens.values():
    warm_up(gen, greedy)
    gen.generate(ids[0], greedy, StopCondition(max_new_tokens=16))
seconds, tokens, cycles = dict.fromkeys(gens, 0.0), dict.fromkeys(gens, 0), dict.fromkeys(gens, 0)
for x in ids:
    for name, gen in gens.items():
        start = time.perf_counter()
        result = gen.generate(x, greedy, stop)
        seconds[name] += time.perf_counter() - start
        tokens[name] += len(result.tokens)
        cycles[name] += result.metrics.cycles
rate = {name: tokens[name] / seconds[name] for name in gens}
print(f"{target.execution.describe()}; {args.prompts} prompts x {args.new_tokens} tokens, T = 0")
for name in gens:
    tau, over = tokens[name] / cycles[name], rate[name] / rate["vanilla"]
    print(f"{name:16s} {rate[name]:6.1f} tok/s  tau {tau:.2f}  x vanilla {over:.2f}")
