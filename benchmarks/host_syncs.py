"""Host syncs per decoding cycle, counted on the CPU (what a GPU would wait for).

    python benchmarks/host_syncs.py [--methods vanilla eagle3] [--weights auto] [--static-shapes on] [--threads 1]

Runs each method (the CLI's names and default settings) on the first MT-bench question for 16 and then 48 new
tokens inside :class:`specdec.bench.syncs.HostSyncCounter`, and prints the extra reads divided by the extra cycles:
the reads one cycle makes, with the prefill's fixed reads cancelled out. Speculative methods run twice: with the
adaptive budget reading its draft values itself, and deferred (``MethodOptions.deferred_budget``: the values ride
on the loop's sync). The issue "A static-shape, compiled decoding cycle" asks for at most 1.
"""

from __future__ import annotations

import argparse

import torch

from specdec.assets import chat_ids, mtbench_prompts
from specdec.bench.syncs import HostSyncCounter
from specdec.generate import StopCondition
from specdec.methods import MethodOptions, build_method
from specdec.methods import method as method_record
from specdec.models import load_smollm2
from specdec.sampling import SamplingParams
from specdec.target import HFTarget


def syncs_per_cycle(gen, ids: torch.Tensor, sampling: SamplingParams, short: int = 16, long: int = 48) -> float:
    """Extra host reads per extra cycle between a ``short`` and a ``long`` generation (after a warm-up)."""
    gen.generate(ids, sampling, StopCondition(max_new_tokens=8), speculate="always")
    counts = []
    for n in (short, long):
        with HostSyncCounter() as syncs:
            result = gen.generate(ids, sampling, StopCondition(max_new_tokens=n), speculate="always")
        counts.append((syncs.count, result.metrics.cycles))
    (a, ca), (b, cb) = counts
    return (b - a) / (cb - ca)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=["vanilla", "eagle3"])
    parser.add_argument("--weights", default="auto")
    parser.add_argument("--static-shapes", choices=("auto", "on", "off"), default="auto")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tokenizer = load_smollm2()
    static = {"auto": "auto", "on": True, "off": False}[args.static_shapes]
    target = HFTarget(model, max_len=1024, weights=args.weights, static_shapes=static)
    target.warm_up()
    sampling = SamplingParams(temperature=0.0)
    ids = chat_ids(tokenizer, mtbench_prompts()[0])
    for method in args.methods:
        for deferred in (False, True) if method != "vanilla" else (None,):
            options = MethodOptions(deferred_budget=deferred)
            gen = build_method(method, target, method_record(method).narrow(options))
            label = f"{method}{' (deferred budget)' if deferred else ''}"
            per_cycle = syncs_per_cycle(gen, ids, sampling)
            print(f"{label:28s} backend {target.execution.label}: {per_cycle:.2f} host syncs per cycle")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
