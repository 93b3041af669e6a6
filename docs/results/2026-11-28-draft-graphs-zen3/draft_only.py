"""Drafting alone: EAGLE-3's dynamic-tree growth after a real prompt, timed and profiled.

    python docs/results/2026-11-28-draft-graphs-zen3/draft_only.py static|eager [depth]

``static``: a static-shape target's head with compiled steps (``draft_weights="stock"``, what ``"auto"`` gave before
this change; run on the commit before it for the "as shipped" row); ``eager``: the eager path's drafter (int8).
Grows a top-8 tree of ``depth`` levels (default 5) from the prompt's last token 30 times (after 3 untimed growths
that compile), prints the median and the minimum, then a ``torch.profiler`` table over 5 growths.
"""

import sys
import time

import torch
from torch.profiler import profile

from specdec.assets import chat_ids, mtbench_prompts
from specdec.methods import MethodOptions, build_method
from specdec.methods import method as method_record
from specdec.models import load_smollm2
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.trees.dynamic import DynamicTreePolicy

static = sys.argv[1] == "static"
depth = int(sys.argv[2]) if len(sys.argv) > 2 else 5
torch.set_num_threads(2)
model, tok = load_smollm2()
target = HFTarget(model, max_len=512, static_shapes=static)
chosen = {"deferred_budget": True, "draft_weights": "stock"} if static else {}
gen = build_method("eagle3", target, method_record("eagle3").narrow(MethodOptions(**chosen)))
drafter = gen.drafter
print(type(drafter).__name__, drafter.execution.describe())
ids = chat_ids(tok, mtbench_prompts()[0])
drafter.prefill(ids, target.prefill(ids).hidden)
root, greedy = ids[-1], SamplingParams(temperature=0)
policy = DynamicTreePolicy(topk=8, depth=depth, total_tokens=24)
start = time.perf_counter()
for _ in range(3):
    policy.grow(drafter, root, greedy, None)
print(f"warm {time.perf_counter() - start:.1f}s")
times = []
for _ in range(30):
    start = time.perf_counter()
    policy.grow(drafter, root, greedy, None)
    times.append(time.perf_counter() - start)
times.sort()
print(f"grow depth {depth}: median {1e3 * times[len(times) // 2]:.2f} ms min {1e3 * times[0]:.2f}")
with profile() as prof:
    for _ in range(5):
        policy.grow(drafter, root, greedy, None)
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
