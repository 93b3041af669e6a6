"""Decoding with every packed linear padding fewer rows to each of ``--pads``, interleaved per prompt, one process.

    python docs/results/2026-11-30-row-padding-amd-f25m17/pad_loop.py [--method vanilla] [--pads 1 5 6 7]
                                                                       [--prompts 10] [--new-tokens 96]

SmolLM2-135M-Instruct (float32, ``weights="auto"`` with padding off, then each pad set on its packed linears by
hand), MT-bench first turns through the chat template, greedy, one generator; for each prompt the pads run back to
back, the order reversed every other prompt. Printed: tokens/s per pad and its ratio to the first pad's, τ, and on
how many prompts every pad emitted the same tokens.
"""

from __future__ import annotations

import argparse
import os
import time
from collections import defaultdict

import torch

os.environ["SPECDEC_ROW_PADDING"] = "off"

from specdec import HFTarget, SamplingParams, StopCondition, build_method, chat_ids  # noqa: E402
from specdec.assets import mtbench_prompts  # noqa: E402
from specdec.backends.cpu import cpu_name  # noqa: E402
from specdec.backends.row_padding import set_pad_rows  # noqa: E402
from specdec.models import load_smollm2  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="vanilla")
    parser.add_argument("--pads", nargs="+", type=int, default=[1, 5, 6, 7])
    parser.add_argument("--prompts", type=int, default=10)
    parser.add_argument("--new-tokens", type=int, default=96)
    args = parser.parse_args()
    torch.set_num_threads(2)
    model, tokenizer = load_smollm2()
    target = HFTarget(model, max_len=1024, weights="auto", in_place=True)
    print(f"cpu={cpu_name()} method={args.method}: {target.execution.describe()}")
    gen = build_method(args.method, target)
    greedy, stop = SamplingParams(temperature=0.0), StopCondition(max_new_tokens=args.new_tokens)
    gen.generate(chat_ids(tokenizer, mtbench_prompts()[0]), greedy, StopCondition(max_new_tokens=8))
    wall, tokens, cycles = defaultdict(float), defaultdict(int), defaultdict(int)
    same = 0
    for i, prompt in enumerate(mtbench_prompts()[: args.prompts]):
        ids, outs = chat_ids(tokenizer, prompt), {}
        for pad in args.pads if i % 2 == 0 else args.pads[::-1]:
            set_pad_rows(target.model, pad)
            start = time.perf_counter()
            out = gen.generate(ids, greedy, stop)
            wall[pad] += time.perf_counter() - start
            tokens[pad] += len(out.tokens)
            cycles[pad] += max(out.metrics.cycles, 1)
            outs[pad] = out.tokens
        same += all(o == outs[args.pads[0]] for o in outs.values())
    first = tokens[args.pads[0]] / wall[args.pads[0]]
    for pad in args.pads:
        rate, tau = tokens[pad] / wall[pad], tokens[pad] / cycles[pad]
        print(f"pad {pad}: {rate:6.2f} tok/s  {rate / first:.3f}x pad {args.pads[0]}  tau {tau:.2f}")
    print(f"same tokens for every pad: {same}/{args.prompts}")


if __name__ == "__main__":
    main()
