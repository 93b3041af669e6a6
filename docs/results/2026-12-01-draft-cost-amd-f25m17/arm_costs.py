"""Per-arm cycle cost split on the package: Fixed(STEP), Fixed(2), Fixed(4), Fixed(OWN), and patterns of plain steps
then one size-2 tree. ``DW=stock`` runs the head compiled on float32 weights instead of eager on int8; ``T`` the
temperature (1.0), ``SIZE3=1`` adds Fixed(3), ``NO_PATTERNS=1`` leaves the patterns out."""

import os
import sys
import time

import torch

from specdec import HFTarget, SamplingParams, StopCondition, build_method, chat_ids
from specdec.assets import load_prompts, select_prompts
from specdec.methods import MethodOptions
from specdec.models import load_smollm2
from specdec.pace import STEP, Fixed, Pace

torch.set_num_threads(2)
model, tok = load_smollm2()
target = HFTarget(model, max_len=2048, weights="auto", static_shapes="aot", in_place=True)
print(target.execution.describe())


class Pattern(Pace):
    def __init__(self, arm, every):
        super().__init__(sizes=(arm,))
        self.arm, self.every = arm, every

    def choose(self):
        self.cycle += 1
        return self.arm if self.cycle % self.every == 0 else STEP


opts = MethodOptions(sampled_tree="r3d", draft_temperature_ratio=0.7, draft_weights=os.environ.get("DW", "auto"))
gen = build_method(sys.argv[1] if len(sys.argv) > 1 else "eagle3", target, opts)
prompts = select_prompts(load_prompts("spec-bench"), 2)
samp = SamplingParams(temperature=float(os.environ.get("T", "1.0")))
paces = {"step": lambda: Fixed(STEP), "size2": lambda: Fixed(2), "size4": lambda: Fixed(4), "own": lambda: Fixed(0)}
paces |= {"size3": lambda: Fixed(3)} if os.environ.get("SIZE3") else {}
if not os.environ.get("NO_PATTERNS"):
    paces |= {"12:size2": lambda: Pattern(2, 12), "3:size2": lambda: Pattern(2, 3)}
warm = chat_ids(tok, prompts[0])
for mk in paces.values():
    gen.generate(warm, samp.model_copy(update={"seed": 0}), StopCondition(max_new_tokens=8), speculate=mk())
agg = {k: dict(draft=0.0, target=0.0, verify=0.0, book=0.0, cycles=0, tokens=0, wall=0.0) for k in paces}
for i, p in enumerate(prompts):
    ids = chat_ids(tok, p)
    for name, mk in paces.items():
        pace = mk()
        t0 = time.perf_counter()
        out = gen.generate(
            ids, samp.model_copy(update={"seed": i}), StopCondition(max_new_tokens=96, eos_token_ids=()), speculate=pace
        )
        m = out.metrics
        a = agg[name]
        a["draft"] += m.time_draft
        a["target"] += m.time_target
        a["verify"] += m.time_verify
        a["book"] += m.time_bookkeeping
        a["cycles"] += m.cycles
        a["tokens"] += len(out.tokens)
        a["wall"] += time.perf_counter() - t0 - m.time_prefill
for name, a in agg.items():
    c = a["cycles"]
    print(
        f"{name:9s} cycles {c:5d} tok/cycle {a['tokens'] / c:.3f}  ms/cycle draft {1e3 * a['draft'] / c:.2f} "
        f"target {1e3 * a['target'] / c:.2f} verify {1e3 * a['verify'] / c:.2f} book {1e3 * a['book'] / c:.2f}  "
        f"tok/s(no prefill) {a['tokens'] / a['wall']:.1f}"
    )
