"""Continuous-batching throughput at several batch sizes, one process, the same 128 greedy prompts.

Usage: ``python batch_sizes.py B [B ...]`` — the first 64 prompts of committed shards 12 and 13, at most 512 new
tokens, loop cut at 64.
"""

from __future__ import annotations

import sys
import time

import torch
from specdec.fastpath import apply_backend

from specdec.models import load_smollm2
from specdec.train.continuous import Job, generate_continuous
from specdec.train.shards import read_shard

FOLDER = "data/self-distilled/smollm2-135m-instruct"


def main() -> None:
    torch.set_num_threads(2)
    model, tok = load_smollm2()
    apply_backend(model, "auto")
    prompts = []
    for shard in (12, 13):
        data = read_shard(f"{FOLDER}/shard-{shard:05d}.safetensors")
        off, plen = data["offsets"], data["prompt_lens"]
        prompts += [data["tokens"][off[i] : off[i] + plen[i]].long().tolist() for i in range(64)]
    for batch in map(int, sys.argv[1:]):
        t = time.perf_counter()
        jobs = [Job(i, p, 0.0) for i, p in enumerate(prompts)]
        out = list(
            generate_continuous(
                model,
                jobs,
                batch_size=batch,
                max_new_tokens=512,
                eos_token_id=tok.eos_token_id,
                pad_token_id=tok.pad_token_id,
                loop_window=64,
            )
        )
        s = time.perf_counter() - t
        n = sum(len(f.response) for f in out)
        print(f"B={batch}: {s:.1f} s, {n} tokens, {n / s:.1f} tok/s", flush=True)


if __name__ == "__main__":
    main()
