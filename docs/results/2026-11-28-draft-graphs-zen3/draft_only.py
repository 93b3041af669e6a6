"""Drafting alone on the static path: time policy.grow (EAGLE-3), profile one."""
import sys, time, torch
from specdec.assets import chat_ids, mtbench_prompts
from specdec.methods import MethodOptions, build_method, method as method_record
from specdec.models import load_smollm2
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.trees.dynamic import DynamicTreePolicy

static = sys.argv[1] == "static"
torch.set_num_threads(2)
model, tok = load_smollm2()
target = HFTarget(model, max_len=512, static_shapes=static)
opts = method_record("eagle3").narrow(MethodOptions(**({"deferred_budget": True} if static else {})))
gen = build_method("eagle3", target, opts)
d = gen.drafter
print(type(d).__name__, d.execution.describe() if hasattr(d.execution, "describe") else d.execution)
ids = chat_ids(tok, mtbench_prompts()[0])
out = target.prefill(ids)
d.prefill(ids, out.hidden)
root = ids[-1]
pol = DynamicTreePolicy(topk=8, depth=int(sys.argv[2]) if len(sys.argv) > 2 else 5, total_tokens=24)
t0 = time.perf_counter()
for _ in range(3):
    pol.grow(d, root, SamplingParams(temperature=0), None)
print(f"warm {time.perf_counter()-t0:.1f}s")
ts = []
for _ in range(30):
    t0 = time.perf_counter(); pol.grow(d, root, SamplingParams(temperature=0), None); ts.append(time.perf_counter() - t0)
ts.sort(); print(f"grow depth {pol.depth}: median {1e3*ts[len(ts)//2]:.2f} ms min {1e3*ts[0]:.2f}")
from torch.profiler import profile
with profile() as prof:
    for _ in range(5):
        pol.grow(d, root, SamplingParams(temperature=0), None)
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
