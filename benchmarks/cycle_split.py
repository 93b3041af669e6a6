"""Where a speculative cycle's time goes: drafting, the target's tree forward, verification, bookkeeping.

    python benchmarks/cycle_split.py [--methods eagle3 ...] [--prompts 8] [--new-tokens 64] [--temperature 0]
                                     [--top-p 1] [--draft-weights auto ...] [--threads 2] [--dtype float32|bfloat16]
                                     [--static-shapes [on|aot] --max-len 512]

Runs each method (the CLI's names, fast path on, default tree settings) on the first ``--prompts`` MT-bench
questions and prints, per method, each phase's share of the summed cycle time and its milliseconds per cycle
(the generator's own phase timers), with τ. The issue "CPU fast path" targets a draft share of at most 10 %.
To compare two versions of the code, run this script from each checkout in turn (ABAB) on the same machine.
``--static-shapes``: the compiled static-shape target and drafter (:mod:`specdec.backends.compiled`) with the
deferred budget; every shape is compiled before anything is timed (:func:`specdec.warm.warm_up`); ``--static-shapes
aot``: the target from its ahead-of-time package (:mod:`specdec.backends.aot`). Each row also gives the mean tree
size (nodes per target forward, the root included).
"""

from __future__ import annotations

import argparse

import torch

from specdec.assets import chat_ids, mtbench_prompts
from specdec.backends.cpu import cpu_name
from specdec.generate import StopCondition
from specdec.methods import MethodOptions, build_method
from specdec.methods import method as method_record
from specdec.models import load_smollm2
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.warm import warm_up

PHASES = ("draft", "target", "verify", "bookkeeping")


def phase_split(gen, ids: list[torch.Tensor], sampling: SamplingParams, new_tokens: int) -> dict:
    """Run ``gen`` on every prompt of ``ids`` (after an 8-token warm-up); sum the generator's phase timers.

    Returns each phase's share of the summed cycle time, its milliseconds per cycle, the cycle count and the
    cycle-weighted τ (tokens emitted per target forward, bonus included).
    """
    # warm-up (and the budget's cost curve); every cycle speculates: the method's own cycle is what is split
    gen.generate(ids[0], sampling, StopCondition(max_new_tokens=8), speculate="always")
    seconds = dict.fromkeys(PHASES, 0.0)
    cycles, emitted, nodes = 0, 0.0, 0
    g = torch.Generator().manual_seed(0)
    for x in ids:
        m = gen.generate(x, sampling, StopCondition(max_new_tokens=new_tokens), g, speculate="always").metrics
        for phase in PHASES:
            seconds[phase] += getattr(m, f"time_{phase}")
        cycles += m.cycles
        nodes += sum(m.tree_sizes)
        emitted += m.tau * m.cycles
    total = sum(seconds.values())
    return {
        "share": {k: v / total for k, v in seconds.items()},
        "ms_per_cycle": {k: 1e3 * v / cycles for k, v in seconds.items()},
        "cycles": cycles,
        "tau": emitted / cycles,
        "tree": nodes / cycles,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=["eagle3"])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--draft-weights", nargs="+", default=["auto"], help="each runs every method in turn")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument(
        "--static-shapes", nargs="?", const="on", choices=("on", "aot"), help="the compiled static-shape path"
    )
    parser.add_argument("--max-len", type=int, default=2048)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tokenizer = load_smollm2(dtype=getattr(torch, args.dtype))
    static = {None: False, "on": True, "aot": "aot"}[args.static_shapes]
    target = HFTarget(model, max_len=args.max_len, static_shapes=static)
    sampling = SamplingParams(temperature=args.temperature, top_p=args.top_p)
    ids = [chat_ids(tokenizer, p) for p in mtbench_prompts()[: args.prompts]]
    print(
        f"threads={args.threads} T={args.temperature} top_p={args.top_p} prompts={args.prompts} "
        f"new_tokens={args.new_tokens} "
        f"dtype={args.dtype} cpu={cpu_name()} target: {target.execution.describe()}"
    )
    for method in args.methods:
        for draft_weights in args.draft_weights if method != "vanilla" else args.draft_weights[:1]:
            chosen: dict = {"draft_weights": draft_weights}
            options = method_record(method).narrow(MethodOptions(**chosen))  # the EAGLE heads read draft_weights
            gen = build_method(method, target, options)
            warm_up(gen, sampling)  # static shapes: every shape compiled before timing (eager: a few cheap forwards)
            r = phase_split(gen, ids, sampling, args.new_tokens)
            cells = "  ".join(f"{k} {r['share'][k]:5.1%} {r['ms_per_cycle'][k]:6.2f} ms" for k in PHASES)
            drafter = getattr(gen, "drafter", None)
            label = f"{method} [{drafter.execution.describe()}]" if hasattr(drafter, "execution") else method
            print(f"{label}: {cells}  tau {r['tau']:.2f}  tree {r['tree']:.1f}  cycles {r['cycles']}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
