"""Where the measured package's rows go: the package ``weights="auto"`` builds here (every linear on the skinny kernel
on this CPU), built with inductor's kernel profiling (each generated kernel a profiler event; the skinny kernel is
called through its C shim, which records no event: it is the forward's time not in any event), 1, 8 and 16 rows,
after a 256-token context; ms per forward by kernel, each forward's wall time beside the events' sum.

    .venv/bin/python docs/results/2026-11-29-package-auto-intel-f6m106/package_kernels.py
"""

import os
import time

os.environ["SPECDEC_CACHE"] = "/tmp/profcache"  # its own package (profiling on), before specdec reads it
os.environ["SPECDEC_KERNELS"] = "measure"
_ext = os.path.expanduser("~/.cache/specdec/ext")  # the kernel already built on this machine (a build is a minute)
os.makedirs("/tmp/profcache", exist_ok=True)
if os.path.isdir(_ext) and not os.path.exists("/tmp/profcache/ext"):
    os.symlink(_ext, "/tmp/profcache/ext")

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
print(t.execution.describe())
trees = {n: _flat_tree(n, t.device, g, t.vocab_size) for n in (1, 8, 16)}
wall = {}
res = {}
for n, tree in trees.items():
    for _ in range(3):
        t.forward_tree(tree)
    start = time.perf_counter()
    for _ in range(10):
        t.forward_tree(tree)
    wall[n] = (time.perf_counter() - start) / 10 * 1e3
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(10):
            t.forward_tree(tree)
    res[n] = {e.key: (e.self_cpu_time_total / 10 / 1e3, e.count / 10) for e in prof.key_averages()}
print("events' self ms", {n: round(sum(v[0] for v in r.values()), 1) for n, r in res.items()})
print("wall ms, unprofiled", {n: round(v, 1) for n, v in wall.items()})
keys = sorted(set(res[1]) | set(res[16]), key=lambda k: -res[16].get(k, (0, 0))[0])
for k in keys[:30]:
    a, b, c = (res[n].get(k, (0, 0)) for n in (1, 8, 16))
    print(f"{k[:60]:60s} x{c[1]:5.0f}  1 row {a[0]:6.2f}  8 rows {b[0]:6.2f}  16 rows {c[0]:6.2f} ms")
