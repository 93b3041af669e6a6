"""Resident memory of SmolLM2 (float32, weights="auto") with MKL tree rows offered ("on") or not ("off"), one fresh
process each: prefill of 100 tokens, then 8 steps. Runs at commit 150ff41, where the candidate existed."""

import re
import sys

import torch

import specdec.backends.measured as measured
from specdec.backends import kernel_times
from specdec.models import load_smollm2
from specdec.target import HFTarget

torch.set_num_threads(2)
if sys.argv[1] == "off":
    kernel_times.mkl_offered = measured.mkl_offered = lambda dtype: False


def rss() -> int:
    return int(re.search(r"VmRSS:\s+(\d+)", open("/proc/self/status").read()).group(1)) // 1024


model, tok = load_smollm2()
t = HFTarget(model, max_len=512, static_shapes=False)
t.prefill(torch.arange(100))
for _ in range(8):
    t.decode_one(torch.tensor(5))
print(sys.argv[1], t.execution.describe()[:160], "VmRSS", rss(), "MB")
