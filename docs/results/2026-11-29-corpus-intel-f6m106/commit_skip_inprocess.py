"""HFTarget.commit with and without the root-only skip, in one process, alternating per prompt: EAGLE-3 with one
sampled token at T = 1 (the case where most cycles accept only the root), ms per cycle by phase.

    .venv/bin/python docs/results/2026-11-29-corpus-intel-f6m106/commit_skip_inprocess.py
"""

import torch

from specdec import HFTarget, SamplingParams, StopCondition, build_method, chat_ids, method_options
from specdec.assets import mtbench_prompts
from specdec.methods import MethodOptions
from specdec.models import load_smollm2

method_options.SAMPLED_SHAPES["r1"] = ((0,),)
torch.set_num_threads(2)


def always_compact(self, accepted: torch.Tensor, count: int) -> None:
    """The commit before the change: the static path compacts the fixed-size path every cycle."""
    if self.static:
        self.cache.compact(self.length, accepted.clamp(min=0))
    elif count > 1:
        self.cache.compact(self.length, accepted[:count])
    self.length += count


model, tok = load_smollm2()
target = HFTarget(model, max_len=1024, in_place=True)
gen = build_method("eagle3", target, MethodOptions(sampled_tree="r1", draft_temperature_ratio=0.7))
skip = HFTarget.commit
prompts = mtbench_prompts()[:8]
stop = StopCondition(max_new_tokens=96, eos_token_ids=())
gen.generate(chat_ids(tok, prompts[0]), SamplingParams(temperature=1.0, seed=0), StopCondition(max_new_tokens=8))
totals = {name: {"cycles": 0, "tokens": 0, "total": 0.0} for name in ("skip", "always")}
for i, prompt in enumerate(prompts):
    for name in ("skip", "always") if i % 2 == 0 else ("always", "skip"):
        HFTarget.commit = skip if name == "skip" else always_compact
        out = gen.generate(chat_ids(tok, prompt), SamplingParams(temperature=1.0, seed=i), stop)
        cell = totals[name]
        for phase, sec in out.metrics.phase_seconds().items():
            cell[phase] = cell.get(phase, 0.0) + sec
        cell["cycles"] += out.metrics.cycles
        cell["tokens"] += len(out.tokens)
        cell["total"] += out.metrics.time_total
HFTarget.commit = skip
for name, cell in totals.items():
    per_cycle = {k: round(v / cell["cycles"] * 1e3, 2) for k, v in cell.items() if k not in ("cycles", "tokens")}
    print(f"{name:7s} {cell['tokens'] / cell['total']:.2f} tok/s, ms per cycle {per_cycle}")
