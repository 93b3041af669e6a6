"""The cached forward-cost curve against the tree forwards the decoding loop times, per size bucket.

    python benchmarks/curve_check.py [--methods eagle3 composite] [--prompts 6] [--new-tokens 96] [--threads 2]
                                     [--temperature 0] [--refresh]

Runs each method on the first ``--prompts`` MT-bench questions (SmolLM2, fast path on) with the cost curve its
policies hold watched (:mod:`specdec.curve_watch`), and prints per bucket of tree sizes the curve's cost, the median
loop time, their ratio and the number of forwards: what the watch judges (a ratio beyond 1 +- 15 % over 12 or more
forwards marks a cached curve stale). ``--refresh`` measures the curve first, in this process.
"""

from __future__ import annotations

import argparse
import statistics
import warnings

import torch

from specdec.assets import chat_ids, mtbench_prompts
from specdec.backends.cpu import cpu_name
from specdec.budget import curves_in, forward_cost_curve
from specdec.curve_watch import CurveWatch, watch_of
from specdec.generate import StopCondition
from specdec.methods import build_method
from specdec.models import load_smollm2
from specdec.sampling import SamplingParams
from specdec.target import HFTarget


def table(watch: CurveWatch) -> str:
    sizes, lines = watch.curve.sizes, [f"{'tokens':>8} {'curve ms':>9} {'loop ms':>8} {'ratio':>6} {'n':>4}"]
    for bucket, ratios in sorted(watch.ratios.items()):
        low = sizes[bucket - 1] + 1 if bucket else 1
        ratio = statistics.median(ratios)
        cost = watch.curve.cost(sizes[bucket]) * 1e3
        lines.append(f"{f'{low}-{sizes[bucket]}':>8} {cost:9.1f} {cost * ratio:8.1f} {ratio:6.2f} {len(ratios):4d}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=["eagle3", "composite"])
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--refresh", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tokenizer = load_smollm2()
    target = HFTarget(model)
    curve = forward_cost_curve(target, refresh=args.refresh)
    print(f"cpu={cpu_name()} threads={args.threads} T={args.temperature} target: {target.execution.describe()}")
    print(f"curve measured {curve.meta.get('date')} (stale: {curve.meta.get('stale')})\n{curve.table()}")
    ids = [chat_ids(tokenizer, p) for p in mtbench_prompts()[: args.prompts]]
    sampling = SamplingParams(temperature=args.temperature)
    for method in args.methods:
        gen = build_method(method, target)
        watch = watch_of(curves_in(gen.policy))
        if watch is None:
            print(f"{method}: its policy holds no watched curve")
            continue
        watch.verdict = "not judged here"  # this script reports every forward, it does not mark the cache
        watch.ratios = {}  # generators built in turn share their curve's watch: this method's forwards only
        watch.record = _recorder(watch)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for x in ids:
                gen.generate(x, sampling, StopCondition(max_new_tokens=args.new_tokens), speculate="always")
        print(f"\n{method} ({sum(map(len, watch.ratios.values()))} tree forwards)\n{table(watch)}")
    return 0


def _recorder(watch: CurveWatch):
    """``watch.record`` without the judging: every forward's ratio kept (not only the latest window)."""

    def record(tokens: int, seconds: float) -> None:
        sizes = watch.curve.sizes
        bucket = min(next((i for i, s in enumerate(sizes) if s >= tokens), len(sizes) - 1), len(sizes) - 1)
        watch.ratios.setdefault(bucket, []).append(seconds / watch.curve.cost(tokens))

    return record


if __name__ == "__main__":
    raise SystemExit(main())
