"""τ of EAGLE-3 on a fixed 16-node dynamic tree (T = 0: the trees are deterministic, so τ compares the heads'
numerics alone) with the draft head's linears run six ways, on the same prompts:

* ``fp32``: float32 weights (``draft_weights="packed"``);
* ``fbgemm``: every linear on fbgemm's dynamic int8 GEMM (``Int8Linear``: int8 weights, inputs quantized per call);
* ``w8-sim``: float32 weights rounded to int8 values (per output channel, symmetric), run in float32: int8 weights
  with float inputs, simulated;
* ``mixed-sim``: as ``w8-sim`` but the vocabulary projection on fbgemm's kernel;
* ``all-w8``: every linear on ``W8Linear`` (the int8-weight skinny kernel);
* ``measured``: the library's default (``draft_int8_linear``: each shape on the kernel measured faster here).

    .venv/bin/python docs/results/2026-11-30-draft-w8-intel-f6m106/tau_w8.py [prompts] [tree size]
"""

import copy
import sys
from unittest import mock

import torch
from torch import nn

import specdec.drafters.eagle as eagle_mod
from specdec import HFTarget, SamplingParams, StopCondition, build_method, chat_ids
from specdec.assets import mtbench_prompts
from specdec.backends.cpu import cpu_name
from specdec.backends.kernels import Int8Linear
from specdec.backends.skinny import W8Linear
from specdec.methods import MethodOptions
from specdec.models import load_smollm2

torch.set_num_threads(2)
model, tok = load_smollm2()
N = int(sys.argv[1]) if len(sys.argv) > 1 else 8
TT = int(sys.argv[2]) if len(sys.argv) > 2 else 16
ids = [chat_ids(tok, p.text).tolist() for p in mtbench_prompts()[:N]]
target = HFTarget(model, max_len=1024, static_shapes=False)
print(f"cpu={cpu_name()}; {N} MT-bench prompts x 96 tokens, T=0, dynamic tree of {TT} nodes")
packed_copy = eagle_mod.packed_copy


def rounded(module: nn.Module, keep_vocab: bool) -> nn.Module:
    """A copy of ``module`` whose linears' weights are rounded to int8 values (the vocabulary projection on fbgemm's
    kernel with ``keep_vocab``)."""
    clone = copy.deepcopy(module)
    with torch.no_grad():
        for m in clone.modules():
            if isinstance(m, nn.Linear) and not (keep_vocab and m.out_features > 10000):
                w = m.weight.float()
                s = (w.abs().amax(dim=1, keepdim=True) / 127.0).clamp(min=1e-12)
                m.weight.copy_((torch.round(w / s).clamp(-127, 127) * s).to(m.weight.dtype))
    if keep_vocab:
        clone.lm_head = Int8Linear(clone.lm_head)
    return clone


def simulated(keep_vocab: bool):
    def copy_of(module, int8=False, transform=None, int8_linear=None):
        return packed_copy(rounded(module, keep_vocab), int8=False, transform=transform)

    return copy_of


sides = {
    "fp32": ("packed", []),
    "fbgemm": ("int8", [mock.patch("specdec.drafters.eagle.draft_int8_linear", Int8Linear)]),
    "w8-sim": ("packed", [mock.patch("specdec.drafters.eagle.packed_copy", simulated(False))]),
    "mixed-sim": ("packed", [mock.patch("specdec.drafters.eagle.packed_copy", simulated(True))]),
    "all-w8": ("int8", [mock.patch("specdec.drafters.eagle.draft_int8_linear", W8Linear)]),
    "measured": ("int8", []),
}
gens = {}
for name, (weights, patches) in sides.items():
    for p in patches:
        p.start()
    gens[name] = build_method("eagle3", target, MethodOptions(draft_weights=weights, total_tokens=TT))
    for p in patches:
        p.stop()
greedy, stop = SamplingParams(temperature=0.0), StopCondition(max_new_tokens=96)
taus: dict[str, list[float]] = {k: [] for k in gens}
outs: dict[str, list[list[int]]] = {k: [] for k in gens}
for x in ids:
    for k, g in gens.items():
        r = g.generate(x, greedy, stop)
        taus[k].append(r.metrics.tau)
        outs[k].append(r.tokens)
for k in gens:
    same = sum(a == b for a, b in zip(outs[k], outs["fp32"], strict=True))
    per = [round(t, 2) for t in taus[k]]
    print(f"{k:9s} tau {sum(taus[k]) / len(taus[k]):.3f}  per prompt {per}  tokens = fp32's {same}/{len(ids)}")
