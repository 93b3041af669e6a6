"""The kernel choice A/B on the CPU at hand: Spec-Bench on ``weights="auto"`` under each side's environment.

    python benchmarks/kernel_choice_ab.py [--sides rule:SPECDEC_KERNELS=rule measured:SPECDEC_KERNELS=measure]
                                          [--per-family 5] [--new-tokens 96] [--temperature 0]
                                          [--methods vanilla eagle3 composite] [--total-tokens N]
                                          [--dtype float32|bfloat16] [--static-shapes off|aot]

Issue 45: a CPU whose results row was measured under the vendor rule (``kernel_times.RULE_KEPT``) keeps the rule
until its row is measured again; this is the measurement that decides. Each side is ``NAME:VAR=VALUE[,VAR=VALUE]``:
its variables are set while its target is prepared and around each of its generations (``SPECDEC_KERNELS``,
``SPECDEC_SKINNY``, and so on), so a side's kernels, measured tables and draft head's kernels are its own. Every side
gets its own SmolLM2-135M-Instruct target (``--dtype``, float32 by default; eager shapes) and methods; the generators
run per prompt back to back, the order alternating, the same seed for every generator of a prompt. Printed: tokens/s,
the ratio to the side's own vanilla and to the first side's vanilla, tau, and at T = 0 whether each output equals its
side's vanilla (greedy speculation must emit plain decoding's tokens). ``--static-shapes aot``: each side's target
is served by its ahead-of-time package (built under the side's variables on its first forward, outside the timing).
Also the A/B of any other switch, e.g. ``--sides off:SPECDEC_CODES=off coded:SPECDEC_CODES=auto`` (a GGUF target's
exact block codes).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections.abc import Iterator

import torch

from specdec import HFTarget, MethodOptions, SamplingParams, StopCondition, build_method, chat_ids
from specdec.assets import select_prompts, spec_bench_prompts
from specdec.backends.cpu import cpu_name
from specdec.models import load_smollm2


def parse_side(text: str) -> tuple[str, dict[str, str]]:
    """``NAME:VAR=VALUE[,VAR=VALUE]`` -> (name, variables)."""
    name, _, assignments = text.partition(":")
    env = dict(item.split("=", 1) for item in assignments.split(",") if item)
    if not name or any(not k for k in env):
        raise SystemExit(f"a side is NAME:VAR=VALUE[,VAR=VALUE], got {text!r}")
    return name, env


@contextlib.contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    """The variables of ``env`` set inside the block, the previous values restored after it."""
    before = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sides", nargs="+", default=["rule:SPECDEC_KERNELS=rule", "measured:SPECDEC_KERNELS=measure"])
    parser.add_argument("--per-family", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--methods", nargs="+", default=["vanilla", "eagle3", "composite"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--static-shapes", choices=["off", "aot"], default="off")
    parser.add_argument(
        "--total-tokens",
        type=int,
        help="a fixed tree size for the tree methods (default: sized per cycle by each "
        "side's own cost curve, which then differs between sides with the curves' noise)",
    )
    args = parser.parse_args(argv)
    if "vanilla" not in args.methods:
        raise SystemExit("--methods must include vanilla (every ratio is to a side's vanilla)")
    torch.set_num_threads(args.threads)
    sides = dict(parse_side(s) for s in args.sides)
    prompts = select_prompts(spec_bench_prompts(), args.per_family)
    gens, env_of = {}, {}
    for side, env in sides.items():
        model, tok = load_smollm2(dtype=getattr(torch, args.dtype))
        longest = max(len(chat_ids(tok, p)) for p in prompts)
        with environment(env):
            static = "aot" if args.static_shapes == "aot" else False
            target = HFTarget(model, max_len=longest + args.new_tokens + 72, static_shapes=static)
            print(f"cpu={cpu_name()} {side} ({env}): {target.execution.describe()}", flush=True)
            for name in args.methods:
                fixed = {"total_tokens": args.total_tokens} if args.total_tokens and name != "vanilla" else {}
                gens[f"{side}/{name}"] = build_method(name, target, MethodOptions(**fixed))
                env_of[f"{side}/{name}"] = env
    stop, warm = StopCondition(max_new_tokens=args.new_tokens), StopCondition(max_new_tokens=8)
    sampling = SamplingParams(temperature=args.temperature)
    for key, gen in gens.items():  # cost curves, measurements and first-call costs outside the timed runs
        with environment(env_of[key]):
            gen.generate(chat_ids(tok, prompts[0]), sampling.model_copy(update={"seed": 0}), warm, speculate="always")
    seconds, tokens, cycles, same, nodes, draft, forward = ({k: 0.0 for k in gens} for _ in range(7))
    for i, prompt in enumerate(prompts):
        ids, seeded, outs = chat_ids(tok, prompt), sampling.model_copy(update={"seed": i}), {}
        for key in list(gens) if i % 2 == 0 else list(reversed(gens)):
            with environment(env_of[key]):
                start = time.perf_counter()
                out = gens[key].generate(ids, seeded, stop, speculate="always")
                seconds[key] += time.perf_counter() - start
            tokens[key] += len(out.tokens)
            cycles[key] += max(out.metrics.cycles, 1)
            nodes[key] += sum(out.metrics.tree_sizes) or out.metrics.cycles
            draft[key] += out.metrics.time_draft
            forward[key] += out.metrics.time_target
            outs[key] = list(out.tokens)
        for key in gens:
            same[key] += outs[key] == outs[key.split("/")[0] + "/vanilla"]
        print(f"   {prompt.id}: done", flush=True)
    rate = {k: tokens[k] / seconds[k] for k in gens}
    first = next(iter(sides))
    head = f"prompts={len(prompts)} new_tokens={args.new_tokens} T={args.temperature} threads={args.threads}"
    print(f"{head} dtype={args.dtype} static_shapes={args.static_shapes}")
    for key in gens:
        side = key.split("/")[0]
        greedy = f"  same as its vanilla {int(same[key])}/{len(prompts)}" if args.temperature == 0 else ""
        print(
            f"   {key:22s} {rate[key]:6.2f} tok/s  {rate[key] / rate[side + '/vanilla']:.3f}x own vanilla  "
            f"{rate[key] / rate[first + '/vanilla']:.3f}x {first} vanilla  tau {tokens[key] / cycles[key]:.2f}{greedy}"
            f"  per cycle: {nodes[key] / cycles[key]:.1f} nodes, draft {1e3 * draft[key] / cycles[key]:.1f} ms, "
            f"forward {1e3 * forward[key] / cycles[key]:.1f} ms"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
