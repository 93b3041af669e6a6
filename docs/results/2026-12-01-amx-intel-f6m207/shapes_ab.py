"""Each distinct SmolLM2 linear shape on its real codes: the AVX-512 coded kernel against its AMX form, per row count
(one process, warm weights, 20 calls a pass, best of 5 interleaved passes), and the AMX form's row invariance and
error against the exact weights in float64."""

import time

import torch

import specdec.backends.skinny as sk
from specdec.backends.skinny_codes import exact_codes
from specdec.models import load_smollm2

sk.load()
torch.set_num_threads(2)
model = load_smollm2()[0]
seen = set()
for name, lin in model.named_modules():
    if not isinstance(lin, torch.nn.Linear) or tuple(lin.weight.shape) in seen:
        continue
    seen.add(tuple(lin.weight.shape))
    c = exact_codes(lin.weight)
    amx, coded = sk.SkinnyLinear(lin, c, amx=True), sk.SkinnyLinear(lin, c)
    x = torch.randn(40, lin.in_features)
    y = amx(x)
    alone = torch.cat([amx(x[i : i + 1]) for i in range(40)])
    err = (y.double() - x.double() @ c.decode().double().T).abs().max().item()
    err_coded = (coded(x).double() - x.double() @ c.decode().double().T).abs().max().item()
    res = {}
    for rows in (1, 4, 8, 16):
        xm = torch.randn(rows, lin.in_features)
        for _ in range(5):
            for kind, mod in (("coded", coded), ("amx", amx)):
                t = time.perf_counter()
                for _ in range(20):
                    mod(xm)
                res[kind, rows] = min(res.get((kind, rows), 1e9), (time.perf_counter() - t) / 20 * 1e6)
    cells = "  ".join(f"{r:2d} rows {res['coded', r]:7.0f} / {res['amx', r]:7.0f}" for r in (1, 4, 8, 16))
    print(f"{name:28s} {str(tuple(lin.weight.shape)):13s} {c.scheme}  us coded / amx: {cells}")
    same = torch.equal(y, alone)
    print(f"{'':28s} rows 1..40 bitwise alone: {same}; max |error| amx {err:.1e}, coded {err_coded:.1e}")
