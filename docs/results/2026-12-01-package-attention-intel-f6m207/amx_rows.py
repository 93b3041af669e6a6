"""The AMX form of three SmolLM2 shapes and the vocabulary projection per row count (warm, 20 calls a pass, best of 7
passes, microseconds), and each shape's rows 1..20 bitwise their rows alone. Run from two checkouts in turn (ABAB)
to compare two builds of the kernel (amx_paired_abab.txt: OLD = 61c1ad0's kernel, NEW = amx_paired.diff)."""

import time

import torch

import specdec.backends.skinny as sk
from specdec.backends.skinny_codes import exact_codes
from specdec.models import load_smollm2

sk.load()
torch.set_num_threads(2)
model = load_smollm2()[0]
ROWS = (1, 4, 5, 6, 7, 8, 12, 16)
names = ["model.layers.0.self_attn.q_proj", "model.layers.0.mlp.gate_proj", "model.layers.0.mlp.down_proj", "lm_head"]
mods = dict(model.named_modules())
tot = {r: 0.0 for r in ROWS}
for name in names:
    lin = mods[name]
    amx = sk.SkinnyLinear(lin, exact_codes(lin.weight), amx=True)
    res = {}
    xs = {r: torch.randn(r, lin.in_features) for r in ROWS}
    for _ in range(7):
        for r in ROWS:
            for _ in range(3):
                amx(xs[r])
            t = time.perf_counter()
            for _ in range(20):
                amx(xs[r])
            res[r] = min(res.get(r, 1e9), (time.perf_counter() - t) / 20 * 1e6)
    print(f"{name:32s} " + "  ".join(f"{r}:{res[r]:7.0f}" for r in ROWS), flush=True)
    # bitwise rows alone (1..20)
    x = torch.randn(20, lin.in_features)
    assert torch.equal(amx(x), torch.cat([amx(x[i : i + 1]) for i in range(20)])), name
