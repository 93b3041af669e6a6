import collections
import os
import sys
import traceback

import torch

from specdec.assets import chat_ids, mtbench_prompts
from specdec.generate import StopCondition
from specdec.methods import MethodOptions, build_method
from specdec.methods import method as method_record
from specdec.models import load_smollm2
from specdec.sampling import SamplingParams
from specdec.target import HFTarget

torch.set_num_threads(2)

if os.environ.get("AS_CUDA"):
    import specdec.tree_checks as tc

    tc.free_reads = lambda device: False
model, tok = load_smollm2()
target = HFTarget(model, max_len=1024, weights="auto", static_shapes="auto")
T = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
sampling = SamplingParams(temperature=T, seed=0)
ids = chat_ids(tok, mtbench_prompts()[0])
name = sys.argv[1]
gen = build_method(name, target, method_record(name).narrow(MethodOptions(deferred_budget=True)))
gen.generate(ids, sampling, StopCondition(max_new_tokens=8), speculate="always")
sites = collections.Counter()
READS = ("item", "tolist", "__int__", "__float__", "__bool__", "__index__", "cpu", "nonzero")
saved = {}
for r in READS:
    orig = getattr(torch.Tensor, r)
    saved[r] = orig

    def counted(t, *a, _o=orig, _r=r, **k):
        st = [f for f in traceback.extract_stack()[:-1] if "/specdec/" in f.filename]
        key = " <- ".join(f"{f.filename.split('/specdec/')[-1]}:{f.lineno}" for f in st[-3:][::-1])
        sites[f"{_r} @ {key}"] += 1
        return _o(t, *a, **k)

    setattr(torch.Tensor, r, counted)
res = gen.generate(ids, sampling, StopCondition(max_new_tokens=48), speculate="always")
for r, o in saved.items():
    setattr(torch.Tensor, r, o)
c = res.metrics.cycles
print(name, "T", T, "cycles", c, "reads", sum(sites.values()), "per cycle", sum(sites.values()) / c)
for k, v in sites.most_common(25):
    print(f"{v / c:5.2f}/cycle {v:4d}  {k}")
