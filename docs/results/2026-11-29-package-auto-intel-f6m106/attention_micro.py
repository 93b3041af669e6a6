"""SDPA (with enable_gqa, as the package's attention) against a matmul form, eager and compiled, for 1 / 8 / 16 query
rows over a 512-slot cache (SmolLM2's 9 query and 3 key/value heads of 64), a mask hiding slots 300 on; weights warm,
2 threads, median of 200 calls.

    .venv/bin/python docs/results/2026-11-29-package-auto-intel-f6m106/attention_micro.py
"""

import time

import torch
import torch.nn.functional as F

torch.set_num_threads(2)
H, HKV, D, C = 9, 3, 64, 512


def sdpa(q, k, v, m):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True)


def manual(q, k, v, m):
    b, h, t, d = q.shape
    qg = q.view(b, HKV, h // HKV * t, d)  # [B, hkv, g*t, d] grouped
    s = torch.matmul(qg, k.transpose(-1, -2)) * d**-0.5  # [B, hkv, g*t, C]
    s = s.view(b, h, t, -1) + m
    p = torch.softmax(s, dim=-1).view(b, HKV, h // HKV * t, -1)
    return torch.matmul(p, v).view(b, h, t, d)


cmanual = torch.compile(manual, dynamic=False)
csdpa = torch.compile(sdpa, dynamic=False)
for t in (1, 8, 16):
    q = torch.randn(1, H, t, D)
    k = torch.randn(1, HKV, C, D)
    v = torch.randn(1, HKV, C, D)
    m = torch.zeros(1, 1, t, C)
    m[..., 300:] = float("-inf")
    ref = sdpa(q, k, v, m)
    for f in (manual, cmanual, csdpa):
        torch.testing.assert_close(f(q, k, v, m), ref, atol=1e-5, rtol=1e-5)
    res = {}
    for name, f in (("sdpa", sdpa), ("manual", manual), ("c-sdpa", csdpa), ("c-manual", cmanual)):
        for _ in range(5):
            f(q, k, v, m)
        ts = []
        for _ in range(200):
            s = time.perf_counter()
            f(q, k, v, m)
            ts.append(time.perf_counter() - s)
        res[name] = sorted(ts)[100] * 1e6
    print(f"t={t}: " + "  ".join(f"{n} {us:.0f} us" for n, us in res.items()), flush=True)
