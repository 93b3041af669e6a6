"""MT-bench τ of the EAGLE methods on fixed dynamic trees of 16 nodes at T=0 (deterministic, so no timing needed).

    python tau16.py OUT.json [methods ...]     # default: eagle2 hass eagle3; LIMIT=n for the first n questions
    python tau16.py OUT.json eagle3=HEAD_DIR   # a method with another head (recorded under "eagle3=HEAD_DIR")

Same settings as ``specdec bench``'s 16-node sweep row: chat template, 128 new tokens or EOS, the shipped heads.
Per question it records (tokens emitted by the cycles, cycles), so two methods compare with a paired error.
"""

import json
import os
import sys
import time
from pathlib import Path

import torch

from specdec.assets import chat_ids, mtbench_prompts
from specdec.generate import StopCondition
from specdec.methods import MethodOptions, build_method
from specdec.models import load_smollm2
from specdec.sampling import SamplingParams
from specdec.target import HFTarget

torch.set_num_threads(2)
out, methods = sys.argv[1], sys.argv[2:] or ["eagle2", "hass", "eagle3"]
model, tok = load_smollm2()
s = SamplingParams(temperature=0.0)
prompts = mtbench_prompts()[: int(os.environ.get("LIMIT", "1000"))]
ids = [chat_ids(tok, p) for p in prompts]
target = HFTarget(model, max_len=max(x.shape[0] for x in ids) + 128 + 64 + 8)
stop = StopCondition(max_new_tokens=128, eos_token_ids=[tok.eos_token_id])
res = {"prompts": len(ids), "max_new_tokens": 128, "tree": "dynamic, 16 nodes, default top-k/depth", "methods": {}}
for m in methods:
    method, _, head_dir = m.partition("=")
    options = MethodOptions(total_tokens=16, head_dir=Path(head_dir) if head_dir else None)
    gen = build_method(method, target, options)
    t0 = time.perf_counter()
    per = []
    for x in ids:
        r = gen.generate(x, s, stop).metrics
        per.append([r.tau * r.cycles, r.cycles])
    emitted, cycles = sum(e for e, _ in per), sum(c for _, c in per)
    seconds = time.perf_counter() - t0
    res["methods"][m] = {"tau": emitted / cycles, "cycles": cycles, "seconds": seconds, "per_prompt": per}
    print(f"{m:8s} tau {emitted / cycles:.3f}  cycles {cycles}  {seconds:.0f} s", flush=True)
with open(out, "w") as f:
    json.dump(res, f, indent=1)
