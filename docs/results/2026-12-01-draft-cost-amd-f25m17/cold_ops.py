"""A small op's time alone, right after the target's forward, and right after a 600 MB reduction (cache-cold)."""

import time

import torch

from specdec import HFTarget
from specdec.models import load_smollm2
from specdec.tree import DraftTree

torch.set_num_threads(2)
model, tok = load_smollm2()
target = HFTarget(model, max_len=2048, weights="auto", static_shapes="aot", in_place=True)
target.prefill(torch.tensor(tok("Hello there, how are you doing today? Tell me a story.")["input_ids"]))
x, w = torch.randn(1, 576), torch.ones(576)
big = torch.randn(150_000_000)  # 600 MB


def median_us(before) -> float:
    ts = []
    for _ in range(40):
        before()
        t = time.perf_counter()
        for _ in range(4):
            torch.rms_norm(x, (576,), w, 1e-5)
        ts.append((time.perf_counter() - t) / 4)
    return sorted(ts)[len(ts) // 2] * 1e6


print("rms_norm alone us", median_us(lambda: None))
print("rms_norm after target forward us", median_us(lambda: target.forward_tree(DraftTree.single(torch.tensor(100)))))
print("after 600MB sum (2 threads)", median_us(lambda: big.sum()))
