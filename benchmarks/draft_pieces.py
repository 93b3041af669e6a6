"""Where the drafting phase's time goes, timed inside the decoding loop (not in a micro-benchmark).

    python benchmarks/draft_pieces.py [--method eagle3] [--prompts 8] [--new-tokens 64] [--threads 2]
                                      [--static-shapes aot]

Wraps the pieces of an EAGLE cycle's drafting (the tree policy's ``grow``, the drafter's expand steps, the head's
forward and lm_head, the top-k, the budget's choice, the rerank) with wall-clock timers and runs the method on the
first ``--prompts`` MT-bench questions at T=0. Prints calls and milliseconds per cycle for each piece; pieces nest
(``grow`` holds the rest), so the rows do not add up. Inside the loop every piece runs right after a target forward
has streamed the model's weights through the caches, which makes small ops several times slower than in isolation:
that is the cost this script shows.
"""

from __future__ import annotations

import argparse
import collections
import functools
import time
from collections.abc import Callable
from typing import Any

import torch

import specdec.drafters.eagle as eagle_drafters
import specdec.trees.adaptive as adaptive
import specdec.trees.dynamic as dynamic
from specdec.assets import chat_ids, mtbench_prompts
from specdec.generate import StopCondition
from specdec.methods import MethodOptions, build_method
from specdec.models import load_smollm2
from specdec.sampling import SamplingParams
from specdec.target import HFTarget

SECONDS: dict[str, float] = collections.defaultdict(float)
CALLS: collections.Counter[str] = collections.Counter()


def timed(owner: Any, name: str, label: str) -> None:
    """Replace ``owner.name`` by a wrapper that adds its wall time to ``SECONDS[label]``."""
    fn: Callable = getattr(owner, name)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            SECONDS[label] += time.perf_counter() - t0
            CALLS[label] += 1

    setattr(owner, name, wrapper)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--method", default="eagle3", help="an EAGLE method of the CLI (eagle3, eagle2, hass)")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--static-shapes", choices=("aot",), help="the target from its ahead-of-time package")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    model, tokenizer = load_smollm2()
    sampling = SamplingParams()
    target = HFTarget(model, **({"static_shapes": args.static_shapes} if args.static_shapes else {}))
    gen = build_method(args.method, target, MethodOptions())
    policy, drafter = gen.policy, gen.drafter
    timed(policy, "grow", "policy.grow")
    for name in ("expand_topk", "_run", "_root_step", "_expand_nodes", "_draft_logits", "_input_hidden"):
        timed(drafter, name, f"drafter.{name}")
    timed(drafter.head, "forward", "head.forward")
    timed(eagle_drafters, "top_children", "top_children")
    timed(dynamic.DynamicTreePolicy, "expand_pool", "expand_pool")
    timed(dynamic.DynamicTreePolicy, "rerank", "rerank")
    timed(adaptive, "budgets_by_depth", "budgets_by_depth")
    timed(adaptive, "choose_budget", "choose_budget")
    ids = [chat_ids(tokenizer, q) for q in mtbench_prompts()[: args.prompts]]
    # warm-up (and the budget's cost curve); every cycle speculates (the method's own drafting is timed)
    gen.generate(ids[0], sampling, StopCondition(max_new_tokens=8), speculate="always")
    SECONDS.clear()
    CALLS.clear()
    cycles = 0
    for x in ids:
        stop = StopCondition(max_new_tokens=args.new_tokens)
        cycles += gen.generate(x, sampling, stop, speculate="always").metrics.cycles
    print(f"{args.method} threads={args.threads} prompts={args.prompts} new_tokens={args.new_tokens} cycles={cycles}")
    for label, seconds in sorted(SECONDS.items(), key=lambda kv: -kv[1]):
        calls, ms, per_call = CALLS[label] / cycles, seconds / cycles * 1e3, seconds / CALLS[label] * 1e6
        print(f"{label:24s} {calls:5.2f} calls/cycle {ms:7.3f} ms/cycle {per_call:8.1f} us/call")


if __name__ == "__main__":
    main()
