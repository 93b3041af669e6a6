"""Where a bfloat16 1-token step goes on this CPU, against float32: torch.profiler over 24 steps after a 120-token
prompt, self CPU time per op (top 12), for float32 (auto) and bfloat16 (auto: packed, row-invariant numerics).

    python docs/results/2026-12-01-intel-f6m207/prof_bf16_step.py
"""

from __future__ import annotations

import time

import torch
from torch.profiler import ProfilerActivity, profile

from specdec import HFTarget
from specdec.models import load_smollm2


@torch.no_grad()
def main() -> None:
    torch.set_num_threads(2)
    for dtype in (torch.float32, torch.bfloat16):
        model, _ = load_smollm2(dtype=dtype)
        target = HFTarget(model, max_len=256, static_shapes=False)
        prompt = torch.randint(0, 49152, (120,), generator=torch.Generator().manual_seed(0))
        target.prefill(prompt)
        for _ in range(8):  # warm
            target.decode_one(torch.tensor(1))
        start = time.perf_counter()
        for _ in range(24):
            target.decode_one(torch.tensor(1))
        step = (time.perf_counter() - start) / 24
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(24):
                target.decode_one(torch.tensor(1))
        print(f"{dtype}: {target.execution.describe()}")
        print(f"  step {1e3 * step:.1f} ms (unprofiled)")
        rows = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:12]
        for e in rows:
            print(f"  {e.key[:48]:48s} {e.self_cpu_time_total / 24 / 1e3:7.2f} ms/step  {e.count // 24:5d} calls/step")


if __name__ == "__main__":
    main()
