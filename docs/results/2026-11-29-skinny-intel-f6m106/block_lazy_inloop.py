"""In-loop A/B on the package path: EAGLE-3 with one sampled token at T = 1, the committed BlockVerifier pinned
against the working tree's, alternated prompt by prompt in one process; ms per cycle by phase."""

import subprocess
import sys
import types

import torch

from specdec import HFTarget, SamplingParams, StopCondition, build_method, chat_ids, method_options
from specdec.assets import mtbench_prompts
from specdec.methods import MethodOptions
from specdec.models import load_smollm2
from specdec.verify import BlockVerifier

old_src = subprocess.run(
    ["git", "show", "HEAD:specdec/verify/block.py"], capture_output=True, text=True, check=True
).stdout
old = types.ModuleType("old_block")
exec(compile(old_src, "old_block.py", "exec"), old.__dict__)
method_options.SAMPLED_SHAPES["r1"] = ((0,),)
torch.set_num_threads(2)
model, tok = load_smollm2()
target = HFTarget(model, max_len=1024, in_place=True)
shape = sys.argv[1] if len(sys.argv) > 1 else "r1"
gens = {}
for name, ver in (("committed", old.BlockVerifier()), ("new", BlockVerifier())):
    g = build_method("eagle3", target, MethodOptions(sampled_tree=shape, draft_temperature_ratio=0.7))
    g.verifier = ver
    gens[name] = g
ps = mtbench_prompts()[: int(sys.argv[2]) if len(sys.argv) > 2 else 8]
stop = StopCondition(max_new_tokens=96, eos_token_ids=())
for g in gens.values():
    g.generate(chat_ids(tok, ps[0]), SamplingParams(temperature=1.0, seed=0), StopCondition(max_new_tokens=8))
acc = {k: {"tot": {}, "cyc": 0, "n": 0, "t": 0.0} for k in gens}
for i, p in enumerate(ps):
    order = list(gens) if i % 2 == 0 else list(gens)[::-1]
    for name in order:
        out = gens[name].generate(chat_ids(tok, p), SamplingParams(temperature=1.0, seed=i), stop)
        a, m = acc[name], out.metrics
        for k, v in m.phase_seconds().items():
            a["tot"][k] = a["tot"].get(k, 0) + v
        a["cyc"] += m.cycles
        a["n"] += len(out.tokens)
        a["t"] += m.time_total
for name, a in acc.items():
    print(
        name,
        f"{a['n'] / a['t']:.2f} tok/s tau {a['n'] / a['cyc']:.2f}",
        {k: round(v / a["cyc"] * 1e3, 2) for k, v in a["tot"].items()},
        "ms per cycle",
    )
