"""Where the package's 8-row forward goes: a package built with inductor's kernel profiling (each generated kernel a
profiler event), 1 row against 8 rows, ms per forward by kernel."""

import os

os.environ["SPECDEC_CACHE"] = "/tmp/profcache"  # its own package (profiling on), before specdec reads it

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import specdec.backends.aot as A  # noqa: E402
import specdec.backends.compiled as C  # noqa: E402
from specdec import HFTarget  # noqa: E402
from specdec.budget import _flat_tree  # noqa: E402
from specdec.models import load_smollm2  # noqa: E402

base = C.cpu_options


def options():
    o = base()
    o["cpp.enable_kernel_profile"] = True
    return o


C.cpu_options = options
A.cpu_options = options


torch.set_num_threads(2)
m, _ = load_smollm2()
t = HFTarget(m, max_len=512, static_shapes="aot")
g = torch.Generator().manual_seed(0)
t.prefill(torch.randint(0, 49152, (256,), generator=g))
trees = {n: _flat_tree(n, t.device, g, t.vocab_size) for n in (1, 8)}
res = {}
for n, tree in trees.items():
    for _ in range(3):
        t.forward_tree(tree)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(10):
            t.forward_tree(tree)
    res[n] = {e.key: (e.self_cpu_time_total / 10 / 1e3, e.count / 10) for e in prof.key_averages()}
print("total self ms", {n: round(sum(v[0] for v in r.values()), 1) for n, r in res.items()})
keys = sorted(set(res[1]) | set(res[8]), key=lambda k: -res[8].get(k, (0, 0))[0])
for k in keys[:40]:
    a, b = res[1].get(k, (0, 0)), res[8].get(k, (0, 0))
    print(f"{k[:60]:60s} x{b[1]:5.0f}  1 row {a[0]:7.2f} ms  8 rows {b[0]:7.2f} ms")
