"""A/B in one process: EAGLE-3 with its head's int8 linears on the rule (fbgemm everywhere) vs measured per shape
(fbgemm or w8), against vanilla, interleaved per prompt. argv: temperature, static (aot|off), prompts."""

import sys
import time

import torch

import specdec.backends.draft_int8 as d8
from specdec import HFTarget, SamplingParams, StopCondition, build_method, chat_ids
from specdec.assets import load_prompts
from specdec.backends.cpu import cpu_name
from specdec.models import load_smollm2

torch.set_num_threads(2)
T = float(sys.argv[1])
static = {"aot": "aot", "off": False}[sys.argv[2]]
n = int(sys.argv[3])
speculate = sys.argv[4] if len(sys.argv) > 4 else None
model, tok = load_smollm2()
target = HFTarget(model, max_len=1024, weights="auto", static_shapes=static, in_place=True)
print(cpu_name(), target.execution.describe(), "T", T, "speculate", speculate)
gens = {"vanilla": build_method("vanilla", target)}
orig = d8.draft_int8_measures
d8.draft_int8_measures = lambda: False
gens["rule"] = build_method("eagle3", target)
d8.draft_int8_measures = lambda: True
gens["measured"] = build_method("eagle3", target)
d8.draft_int8_measures = orig
for k in ("rule", "measured"):
    print(k, sorted({type(m).__name__ for m in gens[k].drafter.head.modules() if "Linear" in type(m).__name__}))
prompts = load_prompts("mtbench")[8 : 8 + n]
samp = SamplingParams(temperature=T)
stop = StopCondition(max_new_tokens=96, eos_token_ids=())
warm = chat_ids(tok, prompts[0])
for g in gens.values():
    g.generate(warm, samp.model_copy(update={"seed": 0}), StopCondition(max_new_tokens=8))
sec = dict.fromkeys(gens, 0.0)
toks = dict.fromkeys(gens, 0)
cyc = dict.fromkeys(gens, 0)
same = 0
for i, p in enumerate(prompts):
    ids = chat_ids(tok, p)
    outs = {}
    for name in gens if i % 2 == 0 else list(reversed(gens)):
        t0 = time.perf_counter()
        out = gens[name].generate(
            ids, samp.model_copy(update={"seed": i}), stop, **({} if name == "vanilla" else {"speculate": speculate})
        )
        sec[name] += time.perf_counter() - t0
        toks[name] += len(out.tokens)
        cyc[name] += out.metrics.cycles or len(out.tokens)
        outs[name] = out.tokens
    same += outs["rule"] == outs["measured"] == outs["vanilla"]
for name in gens:
    r = toks[name] / sec[name]
    print(
        f"{name:9s} {r:6.2f} tok/s {r / (toks['vanilla'] / sec['vanilla']):.3f}x vanilla  "
        f"tau {toks[name] / cyc[name]:.3f}"
    )
print("identical outputs", same, "of", len(prompts))
