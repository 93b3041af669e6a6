import collections

import torch
from torch.profiler import ProfilerActivity, profile

import specdec.cycle as cyc
from specdec import HFTarget, SamplingParams, StopCondition, build_method, chat_ids
from specdec.assets import load_prompts, select_prompts
from specdec.methods import MethodOptions
from specdec.models import load_smollm2
from specdec.pace import Fixed

torch.set_num_threads(2)
model, tok = load_smollm2()
target = HFTarget(model, max_len=2048, weights="auto", static_shapes="aot", in_place=True)
gen = build_method("eagle3", target, MethodOptions(sampled_tree="r3d", draft_temperature_ratio=0.7))
ids = chat_ids(tok, select_prompts(load_prompts("spec-bench"), 1)[0])
samp = SamplingParams(temperature=1.0)
gen.generate(ids, samp.model_copy(update={"seed": 0}), StopCondition(max_new_tokens=16), speculate=Fixed(2))
orig = cyc.draft


def wrapped(*a, **k):
    with torch.profiler.record_function("DRAFT"):
        return orig(*a, **k)


cyc.draft = wrapped

with profile(activities=[ProfilerActivity.CPU]) as prof:
    out = gen.generate(
        ids, samp.model_copy(update={"seed": 1}), StopCondition(max_new_tokens=96, eos_token_ids=()), speculate=Fixed(2)
    )
n = out.metrics.cycles
evs = prof.events()
drafts = [e for e in evs if e.name == "DRAFT"]
inside = collections.Counter()
time_in = collections.Counter()
for e in evs:
    if e.name == "DRAFT":
        continue
    if e.cpu_parent is not None and e.cpu_parent.name == "DRAFT":  # called by the draft phase itself
        inside[e.name] += 1
        time_in[e.name] += e.cpu_time_total
print(
    "cycles",
    n,
    "top-level aten ops per draft:",
    sum(inside.values()) / n,
    "draft us/cycle",
    sum(d.cpu_time_total for d in drafts) / n,
)
for name, t in time_in.most_common(30):
    print(f"{name:50s} {inside[name] / n:6.1f}/cycle {t / n:8.1f} us/cycle")
