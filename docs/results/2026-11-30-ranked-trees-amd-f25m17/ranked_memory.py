"""EAGLE-3 at T = 1 on MT-bench questions 9-16 x 128: r3d against the ranked tree with its default memory (smoothing
0.02) and a long one (0.005), one process, interleaved per prompt."""

import time

import torch

from specdec import HFTarget, SamplingParams, StopCondition, build_method, chat_ids
from specdec.assets import mtbench_prompts
from specdec.methods import MethodOptions
from specdec.models import load_smollm2

torch.set_num_threads(2)
model, tok = load_smollm2()
target = HFTarget(model, max_len=1024, in_place=True)
T1 = SamplingParams(temperature=1.0)
gens = {
    "vanilla": build_method("vanilla", target),
    "r3d": build_method("eagle3", target, MethodOptions(sampled_tree="r3d")),
    "ranked": build_method("eagle3", target, MethodOptions(sampled_tree="ranked")),
    "ranked_long": build_method("eagle3", target, MethodOptions(sampled_tree="ranked")),
}
gens["ranked_long"].policy.for_sampling(T1).smoothing = 0.005
stop = StopCondition(max_new_tokens=128, eos_token_ids=())
prompts = mtbench_prompts()[8:16]
for gen in gens.values():
    gen.generate(chat_ids(tok, prompts[0]), T1.model_copy(update={"seed": 0}), StopCondition(max_new_tokens=8))
secs = dict.fromkeys(gens, 0.0)
toks = dict.fromkeys(gens, 0)
cycles = dict.fromkeys(gens, 0)
for i, p in enumerate(prompts):
    ids = chat_ids(tok, p)
    for name in list(gens) if i % 2 == 0 else list(reversed(gens)):
        t = time.perf_counter()
        out = gens[name].generate(ids, T1.model_copy(update={"seed": i}), stop)
        secs[name] += time.perf_counter() - t
        toks[name] += len(out.tokens)
        cycles[name] += len(out.metrics.tree_sizes) if name != "vanilla" else len(out.tokens)
base = toks["vanilla"] / secs["vanilla"]
for name in gens:
    print(f"{name:12s} {toks[name] / secs[name] / base:.3f}x vanilla  tau {toks[name] / cycles[name]:.2f}")
