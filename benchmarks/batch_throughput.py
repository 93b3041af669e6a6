"""Throughput against batch size: vanilla, EAGLE-3 and the composite decoding several MT-bench prompts together.

    python benchmarks/batch_throughput.py [--methods vanilla eagle3 composite] [--batch-sizes 1 4 8]
                                          [--prompts 8] [--new-tokens 128] [--threads 2]
                                          [--speculate auto [own always]] [--temperature T] [--top-p P]
                                          [--shapes eager [aot]]

Greedy by default (``--temperature``, ``--top-p``: every row's sampling, seeded), float32 SmolLM2-135M-Instruct on
the fast path. For each method, the ``--prompts`` first MT-bench questions
run once through today's one-sequence loop (``generate``, prompt after prompt) and once through
``generate_batch(max_batch=B)`` for each batch size, all in one process, the configurations interleaved per
round so that a slow spell of the machine hits all of them. Prints tokens/s of each and its ratio to batched vanilla
at the same size, τ, and whether every row's tokens equal the prompt decoded alone (greedy: they must, up to float
rounding). Only ratios from one run count on a shared machine. ``--shapes eager aot`` runs every configuration on
both the eager target and the one served by its ahead-of-time package (``static_shapes="aot"``, built first where
this machine has none), named ``method@eager`` and ``method@aot``, each against its own side's batched vanilla.
"""

from __future__ import annotations

import argparse
import time

import torch

from specdec.assets import chat_ids, mtbench_prompts
from specdec.backends.cpu import cpu_name
from specdec.generate import StopCondition, VanillaGenerator
from specdec.methods import build_method
from specdec.models import load_smollm2
from specdec.pace import BATCH_SIZES, OWN, STEP, Fixed, Pace
from specdec.sampling import SamplingParams
from specdec.target import HFTarget


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=["vanilla", "eagle3", "composite"])
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 4, 8])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--temperature", type=float, default=0.0, help="every row's temperature (0: greedy)")
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--skip-loop", action="store_true", help="leave out the one-sequence loop (and the check)")
    parser.add_argument(
        "--speculate",
        nargs="+",
        choices=("auto", "own", "always", "size2", "size3", "size4"),
        default=["auto"],
        help="the batched loop's pace (specdec.pace), each a configuration of its own: auto (steps, own trees or "
        "trees of BATCH_SIZES nodes), own (steps or own trees: auto before the sizes), always (own trees), sizeN "
        "(every cycle trees of N nodes)",
    )
    parser.add_argument("--shapes", nargs="+", choices=("eager", "aot"), default=["eager"])
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tokenizer = load_smollm2()
    ids = [chat_ids(tokenizer, p.text) for p in mtbench_prompts()[: args.prompts]]
    stop = StopCondition(max_new_tokens=args.new_tokens)
    sampling = SamplingParams(temperature=args.temperature, top_p=args.top_p, seed=0)
    gens: dict[str, object] = {}
    paces: dict[str, str] = {}
    bases: dict[str, str] = {}  # each configuration's batched vanilla (its side's)
    for shapes in args.shapes:
        target = HFTarget(model, max_len=1024, static_shapes="aot" if shapes == "aot" else False)
        side = "" if len(args.shapes) == 1 else f"@{shapes}"
        for m in ["vanilla", *(m for m in args.methods if m != "vanilla")]:
            gen = VanillaGenerator(target) if m == "vanilla" else build_method(m, target)
            for kind in ["-"] if m == "vanilla" else args.speculate:
                name = (m if kind == "-" or len(args.speculate) == 1 else f"{m}:{kind}") + side
                gens[name], paces[name], bases[name] = gen, kind, "vanilla" + side
    for gen in gens.values():  # warm-up: kernels, the budget's cost curve
        gen.generate(ids[0], None, StopCondition(max_new_tokens=8))
        gen.generate_batch(ids[:2], None, StopCondition(max_new_tokens=8))
    law = "greedy" if sampling.greedy else f"T = {args.temperature}, top-p {args.top_p}"
    print(
        f"CPU: {cpu_name()}; torch {torch.__version__}, {torch.get_num_threads()} threads; {len(ids)} MT-bench "
        f"prompts, {args.new_tokens} new tokens, {law}, "
        f"speculate={' '.join(args.speculate)}"
    )
    arms: dict[tuple[str, str], str] = {}
    seconds: dict[tuple[str, str], float] = {}
    tokens: dict[tuple[str, str], int] = {}
    taus: dict[tuple[str, str], list[float]] = {}
    alone: dict[str, list[list[int]]] = {}
    same: dict[tuple[str, str], int] = {}
    sizes = ([] if args.skip_loop else ["loop"]) + [str(b) for b in args.batch_sizes]
    for size in sizes:  # one round per size, every method in it
        for name, gen in gens.items():
            t0 = time.perf_counter()
            if size == "loop":
                results = [gen.generate(x, sampling, stop) for x in ids]
                if sampling.greedy:  # sampled rows follow their own seeds: their tokens are not compared
                    alone[name] = [r.tokens for r in results]
            else:
                pace = _pace(paces[name], int(size))
                results = gen.generate_batch(ids, sampling, stop, max_batch=int(size), speculate=pace)
                if isinstance(pace, Pace):
                    arms[(name, size)] = " ".join(f"{ARM_NAMES.get(a, a)}:{n}" for a, n in pace.runs.items())
            key = (name, size)
            seconds[key] = time.perf_counter() - t0
            tokens[key] = sum(len(r.tokens) for r in results)
            taus[key] = [r.metrics.tau for r in results]
            if name in alone:
                same[key] = sum(r.tokens == a for r, a in zip(results, alone[name], strict=True))
            print(
                f"  {name:16s} batch {size:>4s}: {tokens[key] / seconds[key]:6.1f} tok/s  ({seconds[key]:.1f} s)  "
                f"{arms.get(key, '')}",
                flush=True,
            )
    print("\n| method | batch | tok/s | x batched vanilla | x own loop | tau | rows = alone |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for size in sizes:
        for name in gens:
            key = (name, size)
            rate = tokens[key] / seconds[key]
            base = (bases[name], size)
            vs = f"{rate / (tokens[base] / seconds[base]):.2f}x" if base in tokens else "-"
            loop = (name, "loop")
            own = f"{rate / (tokens[loop] / seconds[loop]):.2f}x" if loop in tokens else "-"
            tau = sum(taus[key]) / len(taus[key])
            equal = f"{same[key]}/{len(ids)}" if key in same else "-"
            print(f"| {name} | {size} | {rate:.1f} | {vs} | {own} | {tau:.2f} | {equal} |")
    return 0


ARM_NAMES = {OWN: "own", STEP: "step"}


def _pace(kind: str, batch: int) -> Pace | str:
    """A fresh pace for one call (its cycles counted per arm), or ``"always"`` (vanilla: ignored)."""
    if kind == "auto":
        return Pace(sizes=BATCH_SIZES if batch > 1 else ())
    if kind.startswith("size"):
        return Fixed(int(kind[4:]))
    return Pace() if kind == "own" else "always"


if __name__ == "__main__":
    raise SystemExit(main())
