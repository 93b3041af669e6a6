"""Resident memory of a bfloat16 SmolLM2 target with a 2,048-position cache, after a prefill and 8 steps.

    .venv/bin/python docs/results/2026-11-27-invariant-attention/rss_cache.py SIDE CONTEXT

SIDE: ``before`` (invariant numerics on a bfloat16 cache zero-filled at allocation, as commit 829e2ab allocated it),
``after`` (the float64 cache, allocated uninitialised) or ``variable`` (``invariant=False``: a bfloat16 cache,
allocated uninitialised). Prints one line with VmRSS in MB.
"""

import sys
from pathlib import Path

import torch

import specdec.kvcache as kv
from specdec.models import load_smollm2
from specdec.target import HFTarget


def zero_filled(self, k, v):
    self.keys = k.new_zeros(*k.shape[:2], self.max_len, k.shape[-1])
    self.values = v.new_zeros(*v.shape[:2], self.max_len, v.shape[-1])
    self.is_initialized = True


side, context = sys.argv[1], int(sys.argv[2])
torch.set_num_threads(2)
model, _ = load_smollm2(dtype=torch.bfloat16)
target = HFTarget(model, max_len=2048, in_place=True, invariant=side != "variable")
if side == "before":
    target.runner.cache = target.cache = kv.PositionCache(target.num_layers, 2048)
    kv.PositionLayer.lazy_initialization = zero_filled
with torch.no_grad():
    target.prefill(torch.randint(0, 49152, (context,), generator=torch.Generator().manual_seed(0)))
    for _ in range(8):
        target.decode_one(torch.tensor(5))
status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
print(f"{side:8s} context {context:5d}: VmRSS {int(status['VmRSS'].split()[0]) / 1024:.0f} MB")
