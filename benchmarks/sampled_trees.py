"""Sampled trees at T > 0: the fixed ``r3d`` shape against the per-cycle menu, interleaved per prompt in one process.

    python benchmarks/sampled_trees.py [--weights auto|stock|packed] [--prompts 8] [--new-tokens 128]
                                       [--temperature 1.0] [--threads 2] [--out results.json]

One SmolLM2-135M-Instruct target (float32) on ``--weights``: ``auto`` is the fast path; ``stock`` keeps the stock
linears, whose tree forwards grow with the number of tokens as on a CPU where small-row GEMMs are not flat (on
this AMD EPYC, the stand-in for the Intel Xeon's curve). Methods: vanilla, EAGLE-3 with ``r3d``
(``MethodOptions.sampled_tree``), EAGLE-3 with ``"menu"`` (:class:`~specdec.trees.menu.SampledMenuPolicy`). For
every MT-bench prompt (chat template, no EOS stop, the same seed for every method) the methods run back to back,
the order alternating; printed are tokens/s and the ratio to vanilla, tokens per target forward, and for the menu
the share of cycles that drew each shape. The target's cost curve is printed too (the one both trees are priced by).
"""

from __future__ import annotations

import argparse
import collections
import json
import time
from pathlib import Path

import torch

from specdec import HFTarget, SamplingParams, StopCondition, build_method, chat_ids
from specdec.assets import mtbench_prompts
from specdec.backends.kernels import cpu_name
from specdec.budget import forward_cost_curve
from specdec.methods import MethodOptions
from specdec.models import load_smollm2
from specdec.trees.menu import DEFAULT_MENU, SampledMenuPolicy


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", default="auto", choices=("auto", "stock", "packed"))
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tokenizer = load_smollm2()
    target = HFTarget(model, max_len=1024, weights=args.weights, in_place=True)
    curve = forward_cost_curve(target)
    print(f"cpu={cpu_name()} threads={args.threads} T={args.temperature}: {target.execution.describe()}")
    ratios = (f"{n}: {sec / curve.seconds[0]:.2f}" for n, sec in zip(curve.sizes, curve.seconds, strict=True))
    print("cost curve T(n)/T(1): " + ", ".join(ratios))
    gens = {
        "vanilla": build_method("vanilla", target),
        "r3d": build_method("eagle3", target, MethodOptions(sampled_tree="r3d")),
        "menu": build_method("eagle3", target, MethodOptions(sampled_tree="menu")),
    }
    stop = StopCondition(max_new_tokens=args.new_tokens, eos_token_ids=())
    prompts = mtbench_prompts()[: args.prompts]
    warm = chat_ids(tokenizer, prompts[0])
    for gen in gens.values():  # first-call costs outside the timed runs
        gen.generate(warm, SamplingParams(temperature=args.temperature, seed=0), StopCondition(max_new_tokens=8))
    seconds = dict.fromkeys(gens, 0.0)
    tokens = dict.fromkeys(gens, 0)
    forwards = dict.fromkeys(gens, 0)
    assert isinstance(gens["menu"].parts_for(SamplingParams(temperature=args.temperature))[0], SampledMenuPolicy)
    drawn: collections.Counter[int] = collections.Counter()
    for i, prompt in enumerate(prompts):
        ids = chat_ids(tokenizer, prompt)
        sampling = SamplingParams(temperature=args.temperature, seed=i)
        order = list(gens) if i % 2 == 0 else list(reversed(gens))
        for name in order:
            t0 = time.perf_counter()
            out = gens[name].generate(ids, sampling, stop)
            seconds[name] += time.perf_counter() - t0
            metrics = out.metrics
            tokens[name] += len(out.tokens)
            forwards[name] += max(metrics.cycles, 1) if name != "vanilla" else len(out.tokens)
            if name == "menu":
                drawn.update(metrics.tree_sizes)
        print(f"   {prompt.id}: done", flush=True)
    rate = {k: tokens[k] / seconds[k] for k in gens}
    print(f"prompts={len(prompts)} new_tokens={args.new_tokens}")
    for name in gens:
        print(
            f"   {name:8s} {rate[name]:6.2f} tok/s  {rate[name] / rate['vanilla']:.3f}x vanilla  "
            f"{tokens[name] / forwards[name]:.2f} tokens per target forward"
        )
    print(f"   menu over r3d: {rate['menu'] / rate['r3d']:.3f}x")
    sizes = {len(shape) + 1: shape for shape in DEFAULT_MENU}
    total = sum(drawn.values()) or 1
    print("   menu draws by tree size: " + ", ".join(f"{n} nodes {drawn[n] / total:.0%}" for n in sorted(sizes)))
    if args.out:
        report = {
            "cpu": cpu_name(),
            "weights": args.weights,
            "temperature": args.temperature,
            "curve": {"sizes": curve.sizes, "seconds": curve.seconds},
            "tok_s": rate,
            "draws_by_size": {str(n): drawn[n] for n in sorted(sizes)},
        }
        args.out.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
