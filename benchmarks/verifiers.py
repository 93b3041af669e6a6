"""Verifier benefit on SmolLM2: block vs token-level chains, traversal vs multi-round trees, in one run.

    python benchmarks/verifiers.py [--prompts 16] [--new-tokens 96] [--temperatures 1.0 0.7] [--threads 2]

Each pair runs the same target, the same drafter (the shipped heads, or n-gram) and the same tree policy; only
the verifier differs. For every prompt and temperature both verifiers of a pair run back to back with the same
seed (their drafts agree until the first cycle where their decisions differ). Prompts are MT-bench first turns.
Printed per pair and temperature: τ (tokens per target forward) and tokens/s of each verifier, and the ratios
(second / first). Sampled τ differences of a few percent are within the noise of a few hundred cycles, so the
script also prints a *paired, noise-free* τ: during the first verifier's runs, every cycle's tree and target
logits are handed to both verifiers' plans and their exact expected accepted lengths
(``VerifyPlan.stop_probs(tree) @ tree.depth``) are averaged; same drafts by construction (the time this takes is
excluded from the first verifier's tokens/s). Pairs:

* ``eagle3-chain``: the EAGLE-3 head drafting a sampled chain of 4 (``StochasticTreePolicy.chain``):
  ``ChainVerifier`` vs ``BlockVerifier``;
* ``ngram-chain``: the n-gram drafter's deterministic chain of 4: ``ChainVerifier`` vs ``BlockVerifier``;
* ``eagle1-tree`` / ``eagle3-tree``: the EAGLE-1 / EAGLE-3 head drafting the EAGLE-1 ``mc_sim_7b_63`` shape with
  sampled children (``StochasticTreePolicy.eagle1_default``): ``StochasticMultiRoundVerifier`` vs
  ``TraversalVerifier``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from specdec.assets import chat_ids, mtbench_prompts
from specdec.drafters import NGramDrafter
from specdec.generate import SpeculativeGenerator, StopCondition
from specdec.methods import eagle_drafter
from specdec.models import load_smollm2
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.tree import DraftTree
from specdec.trees import StaticTreePolicy, StochasticTreePolicy
from specdec.verify import (
    BlockVerifier,
    ChainVerifier,
    PlanVerifier,
    StochasticMultiRoundVerifier,
    TraversalVerifier,
    VerifyPlan,
)

CHAIN = 4


class Paired(PlanVerifier):
    """Decides with ``first``; on every cycle also scores ``second``'s plan on the same tree and logits (exact
    expected accepted lengths of both, summed), timing that extra work so it can be subtracted."""

    def __init__(self, first: PlanVerifier, second: PlanVerifier) -> None:
        super().__init__(first.dtype)
        self.first, self.second = first, second
        self.expected = [0.0, 0.0]
        self.cycles = 0
        self.extra_seconds = 0.0

    def plan(self, tree: DraftTree, target_logits: torch.Tensor, sampling: SamplingParams) -> VerifyPlan:
        plan = self.first.plan(tree, target_logits, sampling)
        start = time.perf_counter()
        other = self.second.plan(tree, target_logits, sampling)
        depth = tree.depth.to(plan.accept_prob.dtype)
        self.expected[0] += float(plan.stop_probs(tree) @ depth)
        self.expected[1] += float(other.stop_probs(tree) @ depth)
        self.cycles += 1
        self.extra_seconds += time.perf_counter() - start
        return plan


def pairs(target: HFTarget, names: list[str]) -> dict[str, tuple]:
    """``name -> (drafter, policy, [(label, verifier), (label, verifier)])``."""
    tree = StochasticTreePolicy.eagle1_default()
    width = max(level.width for level in tree.shape.levels)
    tree_verifiers = [
        ("multi-round", StochasticMultiRoundVerifier(max_children=width)),
        ("traversal", TraversalVerifier()),
    ]
    chain_verifiers = [("token-level", ChainVerifier()), ("block", BlockVerifier())]
    drafters = {}

    def drafter(kind: str):
        if kind not in drafters:
            drafters[kind] = NGramDrafter(target.vocab_size) if kind == "ngram" else eagle_drafter(target, kind)
        return drafters[kind]

    build = {
        "eagle3-chain": lambda: (drafter("eagle3"), StochasticTreePolicy.chain(CHAIN), chain_verifiers),
        "ngram-chain": lambda: (drafter("ngram"), StaticTreePolicy.chain(CHAIN), chain_verifiers),
        "eagle1-tree": lambda: (drafter("eagle1"), tree, tree_verifiers),
        "eagle3-tree": lambda: (drafter("eagle3"), tree, tree_verifiers),
    }
    return {name: build[name]() for name in names}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16, help="first N MT-bench questions")
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--temperatures", nargs="+", type=float, default=[1.0, 0.7])
    parser.add_argument("--pairs", nargs="+", default=["eagle3-chain", "ngram-chain", "eagle1-tree", "eagle3-tree"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None, help="write the per-prompt records here (json)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tokenizer = load_smollm2()
    target = HFTarget(model, max_len=1024)
    prompts = [chat_ids(tokenizer, p) for p in mtbench_prompts()[: args.prompts]]
    stop = StopCondition(max_new_tokens=args.new_tokens)
    records = []
    configs = pairs(target, args.pairs)
    for name, (drafter, policy, verifiers) in configs.items():
        for temperature in args.temperatures:
            sampling = SamplingParams(temperature=temperature)
            for i, ids in enumerate(prompts):
                for k, (label, verifier) in enumerate(verifiers):
                    paired = Paired(verifier, verifiers[1][1]) if k == 0 else None
                    gen = SpeculativeGenerator(target, drafter, policy, paired or verifier)
                    start = time.perf_counter()
                    out = gen.generate(ids, sampling, stop, torch.Generator().manual_seed(1000 + i))
                    seconds = time.perf_counter() - start - (paired.extra_seconds if paired else 0.0)
                    m = out.metrics
                    records.append(
                        dict(pair=name, temperature=temperature, prompt=i, verifier=label, tokens=m.new_tokens,
                             cycles=m.cycles, accepted=sum(m.accept_lengths), seconds=seconds,
                             paired_cycles=paired.cycles if paired else 0,
                             paired_expected=paired.expected if paired else None)
                    )  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(records, indent=1))
    print(
        f"SmolLM2-135M-Instruct, {args.prompts} MT-bench prompts, {args.new_tokens} new tokens, {args.threads} threads"
    )
    print(f"{'pair':13} {'T':>4} {'verifier':12} {'tau':>6} {'tok/s':>7} {'verifier':12} {'tau':>6} {'tok/s':>7} "
          f"{'tau ratio':>9} {'speed ratio':>11} {'paired exact tau':>17} {'ratio':>6}")  # fmt: skip
    for name, (_, _, verifiers) in configs.items():
        for temperature in args.temperatures:
            cells, stats = [], []
            for label, _ in verifiers:
                rs = [r for r in records if (r["pair"], r["temperature"], r["verifier"]) == (name, temperature, label)]
                cycles = sum(r["cycles"] for r in rs)
                tau = (sum(r["accepted"] for r in rs) + cycles) / max(1, cycles)
                speed = sum(r["tokens"] for r in rs) / sum(r["seconds"] for r in rs)
                stats.append((tau, speed))
                cells.append(f"{label:12} {tau:6.3f} {speed:7.2f}")
            ratio = f"{stats[1][0] / stats[0][0]:9.3f} {stats[1][1] / stats[0][1]:11.3f}"
            firsts = [r for r in records if (r["pair"], r["temperature"]) == (name, temperature) and r["paired_cycles"]]
            n = sum(r["paired_cycles"] for r in firsts)
            exact = [1 + sum(r["paired_expected"][j] for r in firsts) / max(1, n) for j in (0, 1)]
            paired = f"{exact[0]:8.3f} {exact[1]:8.3f} {exact[1] / exact[0]:6.3f}"
            print(f"{name:13} {temperature:4.1f} {' '.join(cells)} {ratio} {paired}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
