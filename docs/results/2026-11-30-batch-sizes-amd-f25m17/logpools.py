"""Per cycle of one-sequence EAGLE-3 on a fixed 40-node dynamic tree (greedy): every node's log path probability
(its EAGLE-2 value), its parent and the accepted path, for ``sim.py``.

    .venv/bin/python docs/results/2026-11-30-batch-sizes-amd-f25m17/logpools.py 40 96 24 pools40.json

Greedy acceptance in any subset of the tree that holds every kept node's parent is the accepted path's longest
prefix inside it (the target's argmax at a node does not depend on the other nodes), so one large tree per cycle
tells what any smaller tree cut from it would have accepted. The sequence is the target's greedy continuation
whatever the tree, so every cycle is a cycle of any tree size. (Stored rounded to 3 decimals, gzipped.)
"""

import json
import sys
from pathlib import Path

import torch

import specdec.cycle as cycle
from specdec.assets import chat_ids, mtbench_prompts
from specdec.generate import StopCondition
from specdec.method_options import MethodOptions
from specdec.methods import build_method
from specdec.models import load_smollm2
from specdec.target import HFTarget
from specdec.trees import dynamic

torch.set_num_threads(2)
model, tok = load_smollm2()
target = HFTarget(model, max_len=1024, static_shapes=False)
nodes, new_tokens, prompts = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
log, current = [], {}
rerank, settle = dynamic.DynamicTreePolicy.rerank, cycle.settle


def logged_rerank(self, tree):
    out = rerank(self, tree)
    size = tree.size
    order = torch.sort(tree.logq[1:size], descending=True, stable=True).indices[: min(self.max_nodes, size) - 1] + 1
    kept = torch.cat([torch.zeros(1, dtype=torch.long), torch.sort(order).values])
    current["v"], current["par"] = tree.logq[kept].tolist(), out.parents.tolist()
    return out


def logged_settle(row, drafted, step, values):
    result = settle(row, drafted, step, values)
    log.append({"p": current["prompt"], "v": current["v"], "par": current["par"], "path": list(result.path)})
    return result


dynamic.DynamicTreePolicy.rerank = logged_rerank
cycle.settle = logged_settle  # cycle.phases hands the loops the module's settle at each cycle
gen = build_method("eagle3", target, MethodOptions(total_tokens=nodes))
for i, p in enumerate(mtbench_prompts()[:prompts]):
    current["prompt"] = i
    gen.generate(chat_ids(tok, p.text), None, StopCondition(max_new_tokens=new_tokens))
Path(sys.argv[4]).write_text(json.dumps(log))
print(len(log), "cycles")
