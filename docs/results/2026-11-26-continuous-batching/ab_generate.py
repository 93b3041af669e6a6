"""Self-distilled data generation, side by side in one process: HF ``generate`` per batch vs continuous batching.

Usage: ``python ab_generate.py SHARD N`` — the first ``N`` prompts of committed shard ``SHARD``, answered greedily
(max 512 new tokens, loop cut at 64, batch 32) both ways. Prints tokens/s of each, the ratio, and how many
responses equal the committed ones (greedy shards) and each other.

The baseline is the generator ``specdec data regenerate`` used up to commit 5eb8bfc: prompts sorted by length,
HF ``generate`` per batch of 32 with left padding and a stopping criterion for repetition loops.
"""

from __future__ import annotations

import sys
import time

import torch
from specdec.fastpath import apply_backend
from transformers import StoppingCriteria, StoppingCriteriaList

from specdec.models import load_smollm2
from specdec.train.continuous import Job, ends_in_loop, generate_continuous
from specdec.train.shards import read_shard

FOLDER = "data/self-distilled/smollm2-135m-instruct"
BATCH, NEW, WINDOW = 32, 512, 64


class LoopStop(StoppingCriteria):
    def __init__(self, start: int, batch: int):
        self.start, self.cut = start, [0] * batch

    def __call__(self, ids, scores, **kwargs):
        gen = ids[:, self.start :]
        looped = ends_in_loop(gen, torch.full((ids.shape[0],), gen.shape[1]), WINDOW)
        for row in looped.nonzero().flatten().tolist():
            self.cut[row] = self.cut[row] or gen.shape[1]
        return looped


@torch.no_grad()
def per_batch(model, prompts: list[list[int]], eos: int, pad: int) -> list[list[int]]:
    out: dict[int, list[int]] = {}
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    for b in range(0, len(order), BATCH):
        rows = order[b : b + BATCH]
        width = max(len(prompts[i]) for i in rows)
        ids = torch.full((len(rows), width), pad)
        mask = torch.zeros_like(ids)
        for r, i in enumerate(rows):
            ids[r, width - len(prompts[i]) :] = torch.tensor(prompts[i])
            mask[r, width - len(prompts[i]) :] = 1
        stop = LoopStop(width, len(rows))
        gen = model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=NEW,
            do_sample=False,
            eos_token_id=eos,
            pad_token_id=pad,
            stopping_criteria=StoppingCriteriaList([stop]),
        )
        for r, i in enumerate(rows):
            resp = gen[r, width:].tolist()
            end = resp.index(eos) + 1 if eos in resp else None
            cut = stop.cut[r]
            out[i] = resp[:end] if end is not None and (not cut or end <= cut) else resp[:cut] if cut else resp
    return [out[i] for i in range(len(prompts))]


def main() -> None:
    shard, n = int(sys.argv[1]), int(sys.argv[2])
    torch.set_num_threads(2)
    model, tok = load_smollm2()
    apply_backend(model, "auto")
    data = read_shard(f"{FOLDER}/shard-{shard:05d}.safetensors")
    off, plen = data["offsets"].tolist(), data["prompt_lens"].tolist()
    prompts = [data["tokens"][off[i] : off[i] + plen[i]].long().tolist() for i in range(n)]
    committed = [data["tokens"][off[i] + plen[i] : off[i + 1]].long().tolist() for i in range(n)]
    eos, pad = tok.eos_token_id, tok.pad_token_id
    t = time.perf_counter()
    old = per_batch(model, prompts, eos, pad)
    t_old = time.perf_counter() - t
    t = time.perf_counter()
    jobs = [Job(i, p) for i, p in enumerate(prompts)]
    got = {
        f.job.key: f.response
        for f in generate_continuous(
            model, jobs, batch_size=BATCH, max_new_tokens=NEW, eos_token_id=eos, pad_token_id=pad, loop_window=WINDOW
        )
    }
    new = [got[i] for i in range(n)]
    t_new = time.perf_counter() - t
    n_old, n_new = sum(map(len, old)), sum(map(len, new))
    print(f"prompts {n} of shard {shard} (T=0), batch {BATCH}, at most {NEW} new tokens, loop cut at {WINDOW}")
    print(f"HF generate per batch: {t_old:.1f} s, {n_old} tokens, {n_old / t_old:.1f} tok/s")
    print(f"continuous batching:   {t_new:.1f} s, {n_new} tokens, {n_new / t_new:.1f} tok/s")
    same_old = sum(a == b for a, b in zip(old, new, strict=True))
    same_committed = sum(a == b for a, b in zip(new, committed, strict=True))
    print(
        f"ratio {n_new / t_new / (n_old / t_old):.2f}x; equal responses: each other {same_old}/{n}, "
        f"committed {same_committed}/{n}"
    )


if __name__ == "__main__":
    main()
