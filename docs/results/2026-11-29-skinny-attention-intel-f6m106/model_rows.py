"""A float32 SmolLM2 forward of 1, 8 and 16 rows after a 256-token prompt, eager, as ``weights="auto"`` prepares it
here (every linear on the skinny GEMM), with its attention on SDPA (``specdec_sdpa``) and on the few-row kernel
(``specdec_sdpa_skinny``), interleaved in one process (3 rounds x 10 forwards, the best round kept); the two
attentions' largest logit difference beside.

    .venv/bin/python docs/results/2026-11-29-skinny-attention-intel-f6m106/model_rows.py
"""

import time

import torch

from specdec import HFTarget
from specdec.backends.gqa import GQA_ATTENTION, GQA_SKINNY, set_attention
from specdec.budget import _flat_tree
from specdec.models import load_smollm2

torch.set_num_threads(2)
model, _ = load_smollm2()
target = HFTarget(model, max_len=512, static_shapes=False)
print(target.execution.label, "|", target.execution.describe())
g = torch.Generator().manual_seed(0)
target.prefill(torch.randint(0, target.vocab_size, (256,), generator=g))
trees = {n: _flat_tree(n, target.device, g, target.vocab_size) for n in (1, 8, 16)}
times: dict[tuple[str, int], list[float]] = {}
logits: dict[tuple[str, int], torch.Tensor] = {}
for _ in range(3):
    for name in (GQA_ATTENTION, GQA_SKINNY):
        assert set_attention(target.model, name)
        for n, tree in trees.items():
            logits[name, n] = target.forward_tree(tree).logits.clone()
            for _ in range(2):
                target.forward_tree(tree)
            start = time.perf_counter()
            for _ in range(10):
                target.forward_tree(tree)
            times.setdefault((name, n), []).append((time.perf_counter() - start) / 10 * 1e3)
for n in trees:
    sdpa, few = min(times[GQA_ATTENTION, n]), min(times[GQA_SKINNY, n])
    diff = (logits[GQA_ATTENTION, n] - logits[GQA_SKINNY, n]).abs().max().item()
    print(f"{n:2d} rows: SDPA {sdpa:5.1f} ms  few-row kernel {few:5.1f} ms  {sdpa / few:.3f}x  max |dlogit| {diff:.1e}")
for name in (GQA_ATTENTION, GQA_SKINNY):
    one = min(times[name, 1])
    print(f"{name}: T(8)/T(1) {min(times[name, 8]) / one:.3f}  T(16)/T(1) {min(times[name, 16]) / one:.3f}")
