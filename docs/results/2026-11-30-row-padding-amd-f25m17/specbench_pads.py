"""Spec-Bench with every packed linear padding fewer rows to each of ``--pads``, one target, interleaved per prompt.

    python docs/results/2026-11-30-row-padding-amd-f25m17/specbench_pads.py [--pads 1 auto] [--per-family 5]
                                            [--new-tokens 96] [--temperature 0] [--methods vanilla eagle3 composite]

One SmolLM2-135M-Instruct target (float32, ``weights="auto"`` with padding off; ``auto`` in ``--pads`` is the row
count :func:`specdec.backends.row_padding.padding_rows` chooses here). Each method is built per pad with
``SPECDEC_ROW_PADDING`` set to it (its cost curve, named by the pad, is measured by a probe that prepares the shared
model again by that variable); then for every prompt each
(pad, method) runs back to back with its pad set, the order reversed every other prompt, the same seed. One target for
both sides: the weights are the same bytes in the same place, so only the padding differs. Printed: tokens/s, the
ratio to the first pad's vanilla and to the own pad's vanilla, τ, mean tree size, and at T = 0 whether each output
equals its pad's vanilla.
"""

from __future__ import annotations

import argparse
import os
import time
from collections import defaultdict

import torch

os.environ["SPECDEC_ROW_PADDING"] = "off"

from specdec import HFTarget, SamplingParams, StopCondition, build_method, chat_ids  # noqa: E402
from specdec.assets import select_prompts, spec_bench_prompts  # noqa: E402
from specdec.backends.cpu import cpu_name  # noqa: E402
from specdec.backends.row_padding import padding_rows, set_pad_rows  # noqa: E402
from specdec.models import load_smollm2  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pads", nargs="+", default=["1", "auto"])
    parser.add_argument("--per-family", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--methods", nargs="+", default=["vanilla", "eagle3", "composite"])
    args = parser.parse_args()
    torch.set_num_threads(2)
    model, tokenizer = load_smollm2()
    prompts = select_prompts(spec_bench_prompts(), args.per_family)
    longest = max(len(chat_ids(tokenizer, p)) for p in prompts)
    target = HFTarget(model, max_len=longest + args.new_tokens + 72, weights="auto", in_place=True)
    os.environ["SPECDEC_ROW_PADDING"] = "auto"
    pads = [padding_rows(target.model)[0] if p == "auto" else int(p) for p in args.pads]
    print(f"cpu={cpu_name()} T={args.temperature} pads={pads} ({args.pads}): {target.execution.describe()}")
    sampling = SamplingParams(temperature=args.temperature)
    warm = StopCondition(max_new_tokens=8)
    gens = {}
    for pad in pads:
        os.environ["SPECDEC_ROW_PADDING"] = str(pad)  # a cost curve's probe prepares the shared model again by it
        set_pad_rows(target.model, pad)
        for name in args.methods:
            gens[(pad, name)] = gen = build_method(name, target)
            gen.generate(chat_ids(tokenizer, prompts[0]), sampling.model_copy(update={"seed": 0}), warm)
    stop = StopCondition(max_new_tokens=args.new_tokens)
    wall, tokens, cycles, nodes, same = (defaultdict(float) for _ in range(5))
    for i, prompt in enumerate(prompts):
        ids, seeded, outs = chat_ids(tokenizer, prompt), sampling.model_copy(update={"seed": i}), {}
        for key in list(gens) if i % 2 == 0 else list(reversed(gens)):
            os.environ["SPECDEC_ROW_PADDING"] = str(key[0])
            set_pad_rows(target.model, key[0])
            start = time.perf_counter()
            out = gens[key].generate(ids, seeded, stop)
            wall[key] += time.perf_counter() - start
            tokens[key] += len(out.tokens)
            cycles[key] += max(out.metrics.cycles, 1)
            nodes[key] += sum(out.metrics.tree_sizes) or out.metrics.cycles
            outs[key] = out.tokens
        for key in gens:
            same[key] += outs[key] == outs[(key[0], "vanilla")]
    first = tokens[(pads[0], "vanilla")] / wall[(pads[0], "vanilla")]
    print(f"prompts={len(prompts)} new_tokens={args.new_tokens}")
    for key in gens:
        rate = tokens[key] / wall[key]
        own = tokens[(key[0], "vanilla")] / wall[(key[0], "vanilla")]
        greedy = f"  same as its vanilla {int(same[key])}/{len(prompts)}" if args.temperature == 0 else ""
        print(
            f"   pad {key[0]} {key[1]:10s} {rate:6.2f} tok/s  {rate / first:.3f}x pad {pads[0]} vanilla  "
            f"{rate / own:.3f}x own vanilla  tau {tokens[key] / cycles[key]:.2f}  tree {nodes[key] / cycles[key]:.1f}"
            + greedy
        )


if __name__ == "__main__":
    main()
