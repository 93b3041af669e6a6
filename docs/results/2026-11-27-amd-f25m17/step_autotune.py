"""One-off (2026-11-27): the 1-token step, eager fast path (``auto``) against the static-shape compiled path (inductor,
frozen weights) with max-autotune and inductor's C++ GEMM template allowed, in one process, interleaved.

    python step_autotune.py bfloat16 autotune     # or: float32, and "default" for the compiled path as shipped
"""

from __future__ import annotations

import sys
import time

import torch

import specdec.backends.compiled as compiled_backend
from specdec.models import load_smollm2
from specdec.target import HFTarget

torch.set_num_threads(2)
dtype = getattr(torch, sys.argv[1])
autotune = sys.argv[2] == "autotune"
real_compile = torch.compile


def patched_compile(model, **kw):
    if autotune and "options" in kw:
        kw["options"] = {**kw["options"], "max_autotune": True, "max_autotune_gemm_backends": "CPP,ATEN"}
    return real_compile(model, **kw)


compiled_backend.torch.compile = patched_compile
model, _ = load_smollm2(dtype=dtype)
eager = HFTarget(model, max_len=256, invariant=False)
static = HFTarget(model, max_len=256, static_shapes=True, invariant=False)
print("eager:", eager.execution.describe())
print("static:", static.execution.describe())
prompt = torch.randint(0, eager.vocab_size, (120,), generator=torch.Generator().manual_seed(1))
token = torch.tensor(5)
sides = {"eager": eager, "static": static}
for target in sides.values():
    target.prefill(prompt)
t0 = time.perf_counter()
static.decode_one(token)
static.length = 120
print(f"static first step (compile) {time.perf_counter() - t0:.0f} s", flush=True)
times: dict[str, list[float]] = {name: [] for name in sides}
for rep in range(31):
    for name, target in sides.items():
        t0 = time.perf_counter()
        target.decode_one(token)
        if rep:
            times[name].append(time.perf_counter() - t0)
        target.length = 120  # the next step overwrites the same slot
med = {name: 1e3 * sorted(v)[len(v) // 2] for name, v in times.items()}
ratio = med["static"] / med["eager"]
print(f"{sys.argv[1]} autotune={autotune}: eager {med['eager']:.1f} ms, static {med['static']:.1f} ms, {ratio:.2f}")
a = eager.decode_one(token).logits.float()
b = static.decode_one(token).logits.float()
print("argmax equal:", bool((a.argmax(-1) == b.argmax(-1)).all()), "max|diff|", float((a - b).abs().max()))
