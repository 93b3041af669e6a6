"""What the loop's contract checks of drafters and trees cost per cycle (``specdec.tree_checks``), against the cycle.

    python benchmarks/tree_checks.py [--prompts 4] [--new-tokens 48] [--threads 2]

Runs EAGLE-3 on SmolLM2 (float32, fast path, shipped head) at T = 0 (the adaptive deterministic tree) and T = 1 (the
sampled ``r3d`` tree, whose recorded draft law is ``[N, 49152]``) on the first MT-bench questions, keeping every tree
the loop verified. Then times, alone and repeated, what the checks add per cycle: :func:`tree_faults` and reading its
mask, and the drafter-output checks (:func:`checked_topk`'s NaN test on the top-k rows, :func:`checked_draft`'s on the
draft logits), each around a stand-in drafter that returns tensors of the real shapes. Prints microseconds per cycle
and their share of the measured cycle time (same process).
"""

from __future__ import annotations

import argparse
import time

import torch

from specdec.assets import chat_ids, mtbench_prompts
from specdec.backends.cpu import cpu_name
from specdec.generate import StopCondition
from specdec.interfaces import Drafter
from specdec.methods import MethodOptions, build_method
from specdec.models import load_smollm2
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.tree_checks import checked_draft, checked_topk, tree_faults


class _Returns(Drafter):
    """A stand-in drafter returning fixed tensors: timing the checks around its calls times the checks alone."""

    def __init__(self, vocab_size: int, logits, ids, topk) -> None:
        self.vocab_size, self.logits, self.ids, self.topk = vocab_size, logits, ids, topk

    def expand(self, tree, frontier):  # not called
        raise NotImplementedError

    def expand_draft(self, tree, frontier):
        return self.logits, self.ids

    def expand_topk(self, tree, frontier, k):
        return self.topk, torch.zeros(self.topk.shape, dtype=torch.long)


def median_us(fn, repeats: int = 200) -> float:
    """Median wall time of ``fn()`` in microseconds over ``repeats`` calls after 20 warm-ups."""
    for _ in range(20):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e6 * sorted(times)[len(times) // 2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tokenizer = load_smollm2()
    target = HFTarget(model)
    gen = build_method("eagle3", target, MethodOptions())
    ids = [chat_ids(tokenizer, p) for p in mtbench_prompts()[: args.prompts]]
    print(f"cpu={cpu_name()} threads={args.threads} prompts={args.prompts} new_tokens={args.new_tokens}")
    for temperature in (0.0, 1.0):
        sampling = SamplingParams(temperature=temperature, seed=0)
        trees: list = []
        forward = target.forward_tree

        def keep(tree, forward=forward, trees=trees):
            trees.append(tree)
            return forward(tree)

        target.forward_tree = keep
        cycles, seconds = 0, 0.0
        for x in ids:
            m = gen.generate(x, sampling, StopCondition(max_new_tokens=args.new_tokens)).metrics
            cycles += m.cycles
            seconds += m.time_draft + m.time_target + m.time_verify + m.time_bookkeeping
        del target.forward_tree
        cycle_us = 1e6 * seconds / cycles
        sample = trees[:: max(1, len(trees) // 50)]

        def faults(sample=sample):
            for tree in sample:
                int(tree_faults(tree, tree.tokens[0], target.vocab_size))

        check_us = median_us(faults, repeats=20) / len(sample)
        nodes = sum(t.num_nodes for t in sample) / len(sample)
        sampled = sample[0].q_dist is not None
        draft_ids = getattr(gen.drafter, "_draft_ids", None)  # EAGLE-3's draft vocabulary, once it has drafted
        width = target.vocab_size if draft_ids is None else draft_ids.shape[0]
        stub = _Returns(target.vocab_size, torch.randn(2, width), draft_ids, torch.randn(8, 8))
        frontier = torch.zeros(2 if sampled else 8, dtype=torch.long)
        if sampled:  # a level's logits [F, V_d] and its ids (read once per ids tensor, as in the loop)
            draft_us = median_us(lambda s=stub, f=frontier: checked_draft(s, None, f))
        else:  # a level's top-k log q [F, k] and tokens
            draft_us = median_us(lambda s=stub, f=frontier: checked_topk(s, None, f, 8))
        levels = max(t.max_depth for t in sample)
        total = check_us + levels * draft_us
        print(
            f"T={temperature:g}: {cycles} cycles, {cycle_us / 1e3:.1f} ms per cycle, trees of {nodes:.1f} nodes"
            f"{' (q_dist [N, V])' if sampled else ''}; tree check {check_us:.0f} us, drafter-output checks "
            f"~{levels} x {draft_us:.0f} us: {total:.0f} us per cycle = {100 * total / cycle_us:.2f} % of a cycle"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
