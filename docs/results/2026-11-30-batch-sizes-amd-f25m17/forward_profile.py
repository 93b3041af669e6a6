"""Where a batched forward's time goes inside the loop: torch's profiler over 30 forwards (the 20th to the 49th) of
4 MT-bench prompts decoded together, vanilla (4 rows of 1 token) or EAGLE-3 with 2-node trees (4 rows of 2).

    .venv/bin/python docs/results/2026-11-30-batch-sizes-amd-f25m17/forward_profile.py vanilla|size2
"""

import collections
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import specdec.rows as rows_mod
from specdec.assets import chat_ids, mtbench_prompts
from specdec.generate import StopCondition, VanillaGenerator
from specdec.methods import build_method
from specdec.models import load_smollm2
from specdec.pace import Fixed
from specdec.target import HFTarget

torch.set_num_threads(2)
model, tok = load_smollm2()
target = HFTarget(model, max_len=1024, static_shapes=False)
ids = [chat_ids(tok, p.text) for p in mtbench_prompts()[:4]]
which = sys.argv[1]
gen = VanillaGenerator(target) if which == "vanilla" else build_method("eagle3", target)
gen.generate_batch(ids[:2], None, StopCondition(max_new_tokens=8))
profiles, forward, seen = [], rows_mod.BatchRows.forward, [0]


def profiled(self, trees):
    seen[0] += 1
    if not 20 <= seen[0] < 50:
        return forward(self, trees)
    with profile(activities=[ProfilerActivity.CPU]) as p:
        out = forward(self, trees)
    profiles.append(p)
    return out


rows_mod.BatchRows.forward = profiled
pace = "auto" if which == "vanilla" else Fixed(2)
gen.generate_batch(ids, None, StopCondition(max_new_tokens=96), max_batch=4, speculate=pace)
total, count = collections.Counter(), collections.Counter()
for p in profiles:
    for e in p.key_averages():
        total[e.key] += e.self_cpu_time_total
        count[e.key] += e.count
n = len(profiles)
print(which, "forwards", n, "total self ms/forward", round(sum(total.values()) / n / 1000, 1))
for key, us in total.most_common(14):
    print(f"  {key:45s} {us / n / 1000:7.2f} ms  x{count[key] // n}")
