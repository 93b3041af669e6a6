"""Captured features against a separate forward on SmolLM2: 16 prompts of shard 20, batch 8, 96 new tokens.

Usage: ``python capture_check.py``. Prints the worst relative error per feature (bf16 storage included) and the
same for fp32 features stored in bf16, the floor any cache has.
"""

from __future__ import annotations

import torch
from specdec.fastpath import apply_backend

from specdec.models import load_smollm2
from specdec.train.continuous import Job, generate_continuous
from specdec.train.features import FeatureSpec, eagle3_layers, target_hidden
from specdec.train.shards import read_shard


@torch.no_grad()
def main() -> None:
    torch.set_num_threads(2)
    model, tok = load_smollm2()
    apply_backend(model, "auto")
    spec = FeatureSpec(final=True, layers=eagle3_layers(30))
    data = read_shard("data/self-distilled/smollm2-135m-instruct/shard-00020.safetensors")
    off, plen = data["offsets"].tolist(), data["prompt_lens"].tolist()
    jobs = [Job(i, data["tokens"][off[i] : off[i] + plen[i]].long().tolist(), 0.7 * (i % 2), i) for i in range(16)]
    worst = {"final": 0.0, "fused": 0.0}
    floor = {"final": 0.0, "fused": 0.0}
    tokens = 0
    for item in generate_continuous(
        model, jobs, batch_size=8, max_new_tokens=96, eos_token_id=tok.eos_token_id, capture=spec, loop_window=64
    ):
        sequence = torch.tensor(item.job.ids + item.response)
        tokens += sequence.shape[0]
        ref = target_hidden(model, sequence[None], spec)
        for key, got, want in (("final", item.final, ref[0][0]), ("fused", item.fused, ref[1][0])):
            assert got.shape == want.shape, (got.shape, want.shape)
            rel = lambda x, w=want: float(((x.float() - w).norm(dim=-1) / w.norm(dim=-1)).max())  # noqa: E731
            worst[key] = max(worst[key], rel(got))
            floor[key] = max(floor[key], rel(want.bfloat16()))
    print(f"{len(jobs)} sequences, {tokens} tokens")
    for key in worst:
        print(f"{key}: worst relative error captured {worst[key]:.5f}; fp32 stored in bf16 {floor[key]:.5f}")


if __name__ == "__main__":
    main()
