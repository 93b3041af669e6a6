"""Where a T = 1 cycle of EAGLE-3 with one sampled token goes on the package path: ms per cycle by phase
(the decoding loop's own timers), against vanilla; 6 MT-bench prompts x 96 tokens.

    .venv/bin/python docs/results/2026-11-29-corpus-intel-f6m106/cycle_split_t1.py
"""

import torch

from specdec import HFTarget, SamplingParams, StopCondition, build_method, chat_ids, method_options
from specdec.assets import mtbench_prompts
from specdec.methods import MethodOptions
from specdec.models import load_smollm2

method_options.SAMPLED_SHAPES["r1"] = ((0,),)
torch.set_num_threads(2)
model, tok = load_smollm2()
target = HFTarget(model, max_len=1024, in_place=True)
gens = {
    "vanilla": build_method("vanilla", target),
    "r1": build_method("eagle3", target, MethodOptions(sampled_tree="r1", draft_temperature_ratio=0.7)),
}
ps = mtbench_prompts()[:6]
stop = StopCondition(max_new_tokens=96, eos_token_ids=())
for g in gens.values():
    g.generate(chat_ids(tok, ps[0]), SamplingParams(temperature=1.0, seed=0), StopCondition(max_new_tokens=8))
for name, g in gens.items():
    tot = {}
    cyc = 0
    n = 0
    tt = 0
    for i, p in enumerate(ps):
        out = g.generate(chat_ids(tok, p), SamplingParams(temperature=1.0, seed=i), stop)
        m = out.metrics
        for k, v in m.phase_seconds().items():
            tot[k] = tot.get(k, 0) + v
        cyc += m.cycles
        n += len(out.tokens)
        tt += m.time_total
    print(
        name,
        f"{n / tt:.2f} tok/s tau {n / cyc:.2f}",
        {k: round(v / cyc * 1e3, 2) for k, v in tot.items()},
        "ms per cycle",
    )
