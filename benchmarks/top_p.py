"""Top-p on a CPU: the scan of the largest logits against sorting every row (SmolLM2-135M-Instruct).

    python benchmarks/top_p.py [--prompts 6] [--new-tokens 64] [--threads 2]

1. ``warp`` on 16 rows of SmolLM2's logits (a tree's worth), T = 1 top-p 0.9 and T = 0.7 top-p 0.95: milliseconds
   with the scan (:data:`specdec.sampling.NUCLEUS_SCAN`) and with the full sort (``NUCLEUS_SCAN = ()``), and
   whether they keep the same tokens.
2. Vanilla and EAGLE-3 at T = 1, top-p 0.9 on MT-bench prompts, each prompt run with the scan and with the sort
   back to back: tokens/s of each and the scan/sort ratio (only ratios of one run count on a shared machine).
"""

from __future__ import annotations

import argparse
import platform
import time

import torch

import specdec.sampling as sampling
from specdec import HFTarget, SamplingParams, StopCondition, VanillaGenerator, build_method, chat_ids
from specdec.assets import load_prompts
from specdec.models import load_smollm2

SCAN = sampling.NUCLEUS_SCAN


def _ms(fn, repeats: int = 20) -> float:
    fn()
    t = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - t) / repeats * 1e3


def warp_rows(model, tokenizer) -> None:
    ids = chat_ids(tokenizer, "Write a short story about a robot who learns to paint.")
    with torch.no_grad():
        out = model.generate(ids[None], max_new_tokens=40, do_sample=False)
        rows = model(out).logits[0, -16:].float()  # [16, V]
    for params in (SamplingParams(temperature=1.0, top_p=0.9), SamplingParams(temperature=0.7, top_p=0.95)):
        sampling.NUCLEUS_SCAN = SCAN
        scan, kept = _ms(lambda p=params: sampling.warp(rows, p)), sampling.warp(rows, params) > 0
        sampling.NUCLEUS_SCAN = ()
        full, kept_full = _ms(lambda p=params: sampling.warp(rows, p)), sampling.warp(rows, params) > 0
        sampling.NUCLEUS_SCAN = SCAN
        same = bool(torch.equal(kept, kept_full))
        print(f"warp, 16 rows, {params}: scan {scan:.2f} ms, sort {full:.2f} ms ({full / scan:.1f}x), same: {same}")


def loops(model, tokenizer, n_prompts: int, new_tokens: int) -> None:
    target = HFTarget(model, max_len=1024)
    gens = {"vanilla": VanillaGenerator(target), "eagle3": build_method("eagle3", target)}
    prompts = [chat_ids(tokenizer, p.text) for p in load_prompts("mtbench")[:n_prompts]]
    stop = StopCondition(max_new_tokens=new_tokens, eos_token_ids=())
    for g in gens.values():
        g.generate(prompts[0], SamplingParams(temperature=1.0, top_p=0.9, seed=0), StopCondition(max_new_tokens=8))
    totals: dict[tuple[str, str], list[float]] = {}
    for i, ids in enumerate(prompts):
        for way, scan in (("scan", SCAN), ("sort", ())):
            sampling.NUCLEUS_SCAN = scan
            for name, g in gens.items():
                t = time.perf_counter()
                result = g.generate(ids, SamplingParams(temperature=1.0, top_p=0.9, seed=i), stop)
                acc = totals.setdefault((name, way), [0.0, 0.0])
                acc[0] += time.perf_counter() - t
                acc[1] += len(result.tokens)
    sampling.NUCLEUS_SCAN = SCAN
    for name in gens:
        rate = {way: totals[(name, way)][1] / totals[(name, way)][0] for way in ("scan", "sort")}
        print(
            f"{name} T=1 top-p 0.9, {n_prompts} prompts x {new_tokens} tokens: scan {rate['scan']:.1f} tok/s, "
            f"sort {rate['sort']:.1f} tok/s, scan/sort {rate['scan'] / rate['sort']:.2f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{platform.processor() or platform.machine()}, torch {torch.__version__}, {args.threads} threads")
    model, tokenizer = load_smollm2()
    warp_rows(model, tokenizer)
    loops(model, tokenizer, args.prompts, args.new_tokens)


if __name__ == "__main__":
    main()
