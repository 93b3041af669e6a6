"""Every sampled grow of EAGLE-3's ranked tree at T = 1 timed (2 MT-bench prompts x 64 tokens), and the trees drawn:
how the policy priced its levels before DraftClock (run beside another job, as recorded in clock_probe.txt)."""

import statistics
import time
from collections import Counter

import torch

from specdec import HFTarget, SamplingParams, StopCondition, build_method, chat_ids
from specdec.assets import mtbench_prompts
from specdec.methods import MethodOptions
from specdec.models import load_smollm2
from specdec.trees import ranked

torch.set_num_threads(2)
log: list[tuple] = []
original = ranked.StochasticTreePolicy.grow


def timed_grow(self, *args, **kwargs):
    t = time.perf_counter()
    out = original(self, *args, **kwargs)
    log.append((self.max_depth, self.max_nodes, (time.perf_counter() - t) * 1000))
    return out


ranked.StochasticTreePolicy.grow = timed_grow
model, tok = load_smollm2()
target = HFTarget(model, max_len=1024, in_place=True)
gen = build_method("eagle3", target, MethodOptions(sampled_tree="ranked"))
T1 = SamplingParams(temperature=1.0)
stop = StopCondition(max_new_tokens=64, eos_token_ids=())
for i, p in enumerate(mtbench_prompts()[:2]):
    log.append(("new",))
    out = gen.generate(chat_ids(tok, p), T1.model_copy(update={"seed": i}), stop)
for entry in log[:3]:
    print(entry)
for depth in (1, 2, 3, 4):
    ms = [e[2] for e in log if len(e) == 3 and e[0] == depth]
    if ms:
        print(
            "depth",
            depth,
            "n",
            len(ms),
            "median ms",
            round(statistics.median(ms), 2),
            "mean",
            round(sum(ms) / len(ms), 2),
        )
m = out.metrics
print("cycles", len(m.tree_sizes), Counter(m.tree_sizes), "draft s", m.time_draft, "target s", m.time_target)
