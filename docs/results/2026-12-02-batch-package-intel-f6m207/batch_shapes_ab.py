"""Batched plain decoding on eager shapes against the ahead-of-time packages, in one process, repeated: 8 MT-bench
prompts (greedy) through ``generate_batch(max_batch=B)`` for B = 1 (the one-sequence loop), 4 and 8, on an eager
target and on one served by the packages (the batch package for more than one row), the sides' order alternating
each round; the median seconds per configuration and each row's tokens against its prompt decoded alone.

    python docs/results/2026-12-02-batch-package-intel-f6m207/batch_shapes_ab.py [--rounds 5] [--new-tokens 64]
"""

import argparse
import statistics
import time

import torch

from specdec.assets import chat_ids, mtbench_prompts
from specdec.backends.cpu import cpu_name
from specdec.generate import StopCondition, VanillaGenerator
from specdec.models import load_smollm2
from specdec.target import HFTarget

SIZES = (1, 4, 8)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(2)
    model, tokenizer = load_smollm2()
    ids = [chat_ids(tokenizer, p.text) for p in mtbench_prompts()[:8]]
    stop = StopCondition(max_new_tokens=args.new_tokens)
    sides = {
        "eager": VanillaGenerator(HFTarget(model, max_len=1024, static_shapes=False)),
        "aot": VanillaGenerator(HFTarget(model, max_len=1024, static_shapes="aot")),
    }
    for gen in sides.values():  # warm-up: kernels, packages (the batch package built here where missing)
        gen.generate_batch(ids[:2], None, StopCondition(max_new_tokens=8))
    alone = {name: [gen.generate(x, None, stop).tokens for x in ids] for name, gen in sides.items()}
    print(f"CPU: {cpu_name()}; torch {torch.__version__}, 2 threads; 8 MT-bench prompts x {args.new_tokens}, greedy")
    print("greedy tokens of the two sides equal:", alone["eager"] == alone["aot"])
    seconds = {(name, b): [] for name in sides for b in SIZES}
    tokens, same = {}, {}
    for i in range(args.rounds):
        for b in SIZES:
            for name in list(sides)[:: 1 if i % 2 else -1]:
                start = time.perf_counter()
                results = sides[name].generate_batch(ids, None, stop, max_batch=b)
                seconds[name, b].append(time.perf_counter() - start)
                tokens[name, b] = sum(len(r.tokens) for r in results)
                same[name, b] = sum(r.tokens == a for r, a in zip(results, alone[name], strict=True))
        print(f"round {i + 1}: " + ", ".join(f"{k[0]}@{k[1]} {v[-1]:.2f} s" for k, v in seconds.items()), flush=True)
    head = "| rows | eager tok/s | package tok/s | package / eager | eager / its 1 | package / its 1 | rows = alone |"
    print("\n" + head)
    print("| --- | --- | --- | --- | --- | --- | --- |")
    rate = {k: tokens[k] / statistics.median(v) for k, v in seconds.items()}
    for b in SIZES:
        e, a = rate["eager", b], rate["aot", b]
        alike = f"{same['eager', b]}/8, {same['aot', b]}/8"
        scaling = f"{e / rate['eager', 1]:.2f}x | {a / rate['aot', 1]:.2f}x"
        print(f"| {b} | {e:.1f} | {a:.1f} | {a / e:.2f}x | {scaling} | {alike} |")


if __name__ == "__main__":
    main()
