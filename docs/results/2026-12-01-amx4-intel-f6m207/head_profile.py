"""Where the EAGLE-3 head's draft step goes on the amx4 package (torch profiler, children of head.forward and
_draft_logits inside the decoding loop, 2 MT-bench prompts x 64 tokens, every cycle speculating).

    python docs/results/2026-12-01-amx4-intel-f6m207/head_profile.py   # head_profile.txt
"""

import collections

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from specdec.assets import chat_ids, mtbench_prompts
from specdec.generate import StopCondition
from specdec.methods import MethodOptions, build_method
from specdec.models import load_smollm2
from specdec.sampling import SamplingParams
from specdec.target import HFTarget

torch.set_num_threads(2)
model, tok = load_smollm2()
target = HFTarget(model, static_shapes="aot")
gen = build_method("eagle3", target, MethodOptions())
d = gen.drafter
for name in ("_root_step", "_draft_logits", "_input_hidden"):
    f = getattr(d, name)

    def wrap(*a, _f=f, _n=name, **k):
        with record_function("PIECE" + _n):
            return _f(*a, **k)

    setattr(d, name, wrap)
hf = d.head.forward


def hw(*a, **k):
    with record_function("PIECEhead.forward"):
        return hf(*a, **k)


d.head.forward = hw
ids = [chat_ids(tok, q) for q in mtbench_prompts()[:3]]
gen.generate(ids[0], SamplingParams(), StopCondition(max_new_tokens=16), speculate="always")
with profile(activities=[ProfilerActivity.CPU]) as prof:
    for x in ids[1:]:
        gen.generate(x, SamplingParams(), StopCondition(max_new_tokens=64), speculate="always")
ev = prof.events()


def walk(e, acc):
    for c in e.cpu_children:
        acc[c.name][0] += c.self_cpu_time_total
        acc[c.name][1] += 1
        walk(c, acc)


for piece in ("PIECEhead.forward", "PIECE_draft_logits"):
    tops = [e for e in ev if e.name == piece]
    acc = collections.defaultdict(lambda: [0.0, 0])
    for e in tops:
        walk(e, acc)
    tot = sum(e.cpu_time_total for e in tops)
    print(f"== {piece}: {len(tops)} calls, {tot / len(tops):.0f} us/call; children self time per call:")
    for n, (t, c) in sorted(acc.items(), key=lambda kv: -kv[1][0])[:14]:
        print(f"   {n:55s} {t / len(tops):8.1f} us  {c / len(tops):5.1f} calls")
