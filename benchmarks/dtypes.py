"""float32 against bfloat16 end to end, interleaved per prompt in one process (SmolLM2-135M-Instruct, CPU).

    python benchmarks/dtypes.py [--prompts 8] [--new-tokens 128] [--threads 2] [--methods vanilla eagle3]
                                [--out results.json]

Both models live in one process, each on its ``auto`` path (float32: packed linears; bfloat16: packed bfloat16
linears with row-invariant numerics where the CPU has native bfloat16), and a third target runs the bfloat16 model
with ``invariant=False``. For every MT-bench prompt (chat template, T = 0, no EOS stop) each method runs on each
target back to back, so the ratios are measured side by side: tokens/s per method and target, bfloat16 / float32,
the cost of the invariant numerics, and whether each speculative run emitted its own vanilla's tokens.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from specdec import HFTarget, SamplingParams, StopCondition, build_method, chat_ids
from specdec.assets import mtbench_prompts
from specdec.backends.cpu import cpu_name
from specdec.methods import MethodOptions
from specdec.models import load_smollm2


def targets() -> dict[str, HFTarget]:
    fp32, _ = load_smollm2()
    bf16, _ = load_smollm2(dtype=torch.bfloat16)
    return {
        "float32": HFTarget(fp32, max_len=1024, in_place=True),
        "bfloat16": HFTarget(bf16, max_len=1024),
        "bfloat16-var": HFTarget(bf16, max_len=1024, invariant=False),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--methods", nargs="+", default=["vanilla", "eagle3"])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    _, tokenizer = load_smollm2()
    sides = targets()
    for name, target in sides.items():
        print(f"{name}: {target.execution.describe()}")
    gens = {(m, t): build_method(m, target, MethodOptions()) for m in args.methods for t, target in sides.items()}
    sampling, stop = SamplingParams(), StopCondition(max_new_tokens=args.new_tokens)
    seconds = {key: 0.0 for key in gens}
    tokens = {key: 0 for key in gens}
    same = {key: 0 for key in gens}
    prompts = mtbench_prompts()[: args.prompts]
    warm = chat_ids(tokenizer, prompts[0])
    for gen in gens.values():  # first-call costs (and each target's cost curve) outside the timed runs
        gen.generate(warm, sampling, StopCondition(max_new_tokens=8))
    for i, prompt in enumerate(prompts):
        ids = chat_ids(tokenizer, prompt)
        out = {}
        order = list(gens) if i % 2 == 0 else list(reversed(gens))  # alternate who runs first
        for key in order:
            t0 = time.perf_counter()
            out[key] = gens[key].generate(ids, sampling, stop).tokens
            seconds[key] += time.perf_counter() - t0
            tokens[key] += len(out[key])
        for (method, target), toks in out.items():
            same[(method, target)] += toks == out[("vanilla", target)] if "vanilla" in args.methods else 0
        print(f"   {prompt.id}: " + ", ".join(f"{m}/{t} {len(v)} tokens" for (m, t), v in out.items()), flush=True)
    rate = {key: tokens[key] / seconds[key] for key in gens}
    print(f"cpu={cpu_name()} threads={args.threads} prompts={len(prompts)} new_tokens={args.new_tokens}, T=0")
    print(f"   {'method':10s} " + " ".join(f"{t:>13s}" for t in sides) + "   bf16/fp32   invariant cost")
    for m in args.methods:
        cells = " ".join(f"{rate[(m, t)]:8.1f} tok/s" for t in sides)
        ratio = rate[(m, "bfloat16")] / rate[(m, "float32")]
        cost = rate[(m, "bfloat16")] / rate[(m, "bfloat16-var")]
        print(f"   {m:10s} {cells}   {ratio:8.2f}x   {cost:8.2f}x")
        if m != "vanilla" and "vanilla" in args.methods:
            equal = ", ".join(f"{t} {same[(m, t)]}/{len(prompts)}" for t in sides)
            print(f"   {'':10s} greedy = own vanilla: {equal}")
    if args.out:
        report = {f"{m}/{t}": {"tok_s": rate[(m, t)], "same_as_vanilla": same[(m, t)]} for m, t in gens}
        args.out.write_text(json.dumps({"cpu": cpu_name(), "prompts": len(prompts), **report}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
