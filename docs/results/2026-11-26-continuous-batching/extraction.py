"""Feature extraction throughput and accuracy: fp32 target at batch 1 vs batched, and a bf16 target.

Usage: ``python extraction.py``. Sequences 200-231 (batching) and 300-315 (bf16) of the self-distilled data,
EAGLE-3's feature spec (final + layers 2, 15, 27), stock backend, 2 threads.
"""

from __future__ import annotations

import time

import torch

from specdec.models import load_smollm2
from specdec.train.features import FeatureSpec, eagle3_layers, target_hidden
from specdec.train.shards import load_regenerated

SPEC = FeatureSpec(final=True, layers=eagle3_layers(30))


def rate(model, seqs: list[torch.Tensor], batch: int) -> float:
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    target_hidden(model, seqs[0][None], SPEC)  # warm-up
    t = time.perf_counter()
    for b in range(0, len(seqs), batch):
        group = [seqs[i] for i in order[b : b + batch]]
        width = max(len(x) for x in group)
        ids = torch.zeros(len(group), width, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for r, x in enumerate(group):
            ids[r, : len(x)], mask[r, : len(x)] = x, 1
        target_hidden(model, ids, SPEC, mask if batch > 1 else None)
    return sum(len(s) for s in seqs) / (time.perf_counter() - t)


@torch.no_grad()
def main() -> None:
    torch.set_num_threads(2)
    data = load_regenerated("data/self-distilled/smollm2-135m-instruct", max_len=1024)
    fp32, _ = load_smollm2()
    seqs = [data[i].input_ids for i in range(200, 232)]
    for batch in (1, 4, 8):
        print(f"fp32, batch {batch} (sorted by length): {rate(fp32, seqs, batch):.1f} tok/s")
    bf16, _ = load_smollm2(dtype=torch.bfloat16)
    seqs = [data[i].input_ids for i in range(300, 316)]
    print(f"fp32 batch 1: {rate(fp32, seqs, 1):.1f} tok/s; bf16 batch 1: {rate(bf16, seqs, 1):.1f} tok/s")
    ref = [target_hidden(fp32, s[None], SPEC) for s in seqs]
    low = [target_hidden(bf16, s[None], SPEC) for s in seqs]
    for k, name in ((0, "final"), (1, "fused")):
        a = torch.cat([r[k][0].float() for r in ref])
        b = torch.cat([x[k][0].float() for x in low])

        def rel(x: torch.Tensor, a: torch.Tensor = a) -> float:
            return float(((x - a).norm(dim=-1) / a.norm(dim=-1)).mean())

        stored = rel(a.bfloat16().float())
        print(f"{name}: relative error, bf16 target {rel(b):.5f}; fp32 features stored in bf16 {stored:.5f}")
    w = fp32.lm_head.weight
    a = torch.cat([r[0][0].float() for r in ref])
    b = torch.cat([x[0][0].float() for x in low])
    agree = float(((a @ w.T).argmax(-1) == (b @ w.T).argmax(-1)).float().mean())
    print(f"target argmax agreement (lm_head of final): {agree:.4f}")


if __name__ == "__main__":
    main()
