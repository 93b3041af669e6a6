"""A/B in one process: the ahead-of-time package with exact block codes (SPECDEC_CODES=auto) against without (off),
and each side's 1-token step against HF's (stock model, DynamicCache)."""

import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[3] / "benchmarks"))
import fastpath  # noqa: E402

from specdec.backends.cpu import cpu_info  # noqa: E402
from specdec.models import load_smollm2  # noqa: E402
from specdec.target import HFTarget  # noqa: E402

torch.set_num_threads(2)
i = cpu_info()
print(i.get("model name"), "family", i.get("cpu family"), "model", i.get("model"), flush=True)
t = time.perf_counter()
os.environ["SPECDEC_CODES"] = "off"
a = HFTarget(load_smollm2()[0], max_len=512, static_shapes="aot")
a.prefill(torch.arange(8))
print(f"off ready {time.perf_counter() - t:.0f}s", a.execution.describe(), flush=True)
t = time.perf_counter()
os.environ["SPECDEC_CODES"] = "auto"
b = HFTarget(load_smollm2()[0], max_len=512, static_shapes="aot")
b.prefill(torch.arange(8))
print(f"coded ready {time.perf_counter() - t:.0f}s", b.execution.describe(), flush=True)
fastpath.SIZES = (1, 2, 4, 8, 12, 16)
curve = fastpath.forward_curve({"off": a, "coded": b}, 120, 15)
for k, r in curve.items():
    print(k, " ".join(f"T({n})={v:.1f}" for n, v in r.items()), f"T8/T1={r[8] / r[1]:.2f} T16/T1={r[16] / r[1]:.2f}")
print("coded/off: " + " ".join(f"T({n}) {curve['coded'][n] / curve['off'][n]:.3f}" for n in fastpath.SIZES))
hf = load_smollm2()[0]
for name, side in (("off", a), ("coded", b)):
    print(name, fastpath.one_token_steps(side, {"float32": hf}, 120, 10))
