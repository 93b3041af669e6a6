"""Before/after of the row-invariant attention, in one process (bfloat16 SmolLM2-135M-Instruct, CPU).

    PYTHONPATH=. python docs/results/2026-11-27-invariant-attention/ab_attention.py [--contexts 120 500 1000]
                                                                                    [--rounds 60] [--check]

Sides, all on one bfloat16 model with packed linears (each a transformed copy sharing its tensors):

* ``before``: the invariant attention of commit 829e2ab (float32 scores over >= 8 rows, ``exp`` on whole vectors,
  a float64 ``weights @ [values | 1]`` GEMM), loaded from git, on a bfloat16 cache (as that commit ran it);
* ``after``: this commit's, SDPA in float64 on a float64 cache;
* ``variable``: ``invariant=False`` (bfloat16 SDPA, no row padding): what invariance costs at all.

For every context, shape (a 1-token step, chains of 8 and 16 tree tokens) and side, the forward's wall time, sides
interleaved round by round; printed: medians and the per-round paired ratios after/before and after/variable (their
medians). ``--check`` first checks, for both invariant sides, that every row of a 9-node branching tree is bitwise
its path's 1-token step at each context.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

import torch
from transformers import AttentionInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

from specdec.backends.cpu import cpu_name
from specdec.backends.gqa import set_attention
from specdec.kvcache import PositionCache
from specdec.models import load_smollm2
from specdec.target import HFTarget
from specdec.tree import DraftTree
from tests.test_invariant import tree_and_paths

BEFORE = "829e2ab"


def before_attention():
    root = Path(__file__).resolve().parents[3]
    source = subprocess.run(
        ["git", "show", f"{BEFORE}:specdec/backends/gqa.py"], cwd=root, capture_output=True, text=True, check=True
    ).stdout
    module = types.ModuleType("gqa_before")
    exec(compile(source, "gqa_before.py", "exec"), module.__dict__)
    return module._gqa_attention_invariant


def side(model, name: str, max_len: int) -> HFTarget:
    if name == "variable":
        return HFTarget(model, max_len=max_len, invariant=False)
    target = HFTarget(model, max_len=max_len, invariant=True)
    if name == "before":
        set_attention(target.model, "before_invariant")
        target.runner.cache = target.cache = PositionCache(target.num_layers, max_len)  # the model's dtype
    return target


@torch.no_grad()
def rows_are_steps(model, name: str, context: int) -> bool:
    target = side(model, name, context + 16)
    prompt = torch.randint(0, target.vocab_size, (context,), generator=torch.Generator().manual_seed(1))
    tree, paths = tree_and_paths(target.vocab_size, 0)
    target.prefill(prompt)
    rows = target.forward_tree(tree).logits
    same = []
    for i, path in enumerate(paths):
        target.length = context
        for token in path:
            logits = target.decode_one(torch.tensor(token)).logits
        same.append(torch.equal(logits[0], rows[i]))
    return all(same)


def chain(n: int) -> DraftTree:
    tokens = torch.randint(0, 49152, (n,), generator=torch.Generator().manual_seed(n))
    return DraftTree.from_parents(tokens, torch.arange(-1, n - 1), n - 1)


@torch.no_grad()
def timings(model, context: int, rounds: int) -> dict:
    sides = {name: side(model, name, context + 32) for name in ("before", "after", "variable")}
    shapes = {"step": None, "tree8": chain(8), "tree16": chain(16)}
    prompt = torch.randint(0, 49152, (context,), generator=torch.Generator().manual_seed(1))
    times = {(k, s): [] for k in sides for s in shapes}
    for target in sides.values():
        target.prefill(prompt)
    for round_ in range(rounds + 1):  # round 0 warms every shape up
        for shape, tree in shapes.items():
            for name, target in sides.items():
                t0 = time.perf_counter()
                if tree is None:
                    target.decode_one(torch.tensor(5))
                else:
                    target.forward_tree(tree)
                dt = time.perf_counter() - t0
                target.length = context
                if round_:
                    times[name, shape].append(dt)
    return {"shapes": list(shapes), "times": times}


def paired(a: list[float], b: list[float]) -> float:
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int, nargs="+", default=[120, 500, 1000])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    AttentionInterface.register("before_invariant", before_attention())
    AttentionMaskInterface.register("before_invariant", ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    model, _ = load_smollm2(dtype=torch.bfloat16)
    print(f"cpu={cpu_name()} threads={args.threads} torch={torch.__version__} dtype=bfloat16 before={BEFORE}")
    if args.check:
        for name in ("before", "after"):
            print(
                f"tree rows bitwise = 1-token steps, {name}:",
                {c: rows_are_steps(model, name, c) for c in args.contexts},
            )
    for context in args.contexts:
        r = timings(model, context, args.rounds)
        print(f"context {context} (median ms; paired ratios are medians of per-round ratios)")
        for shape in r["shapes"]:
            t = r["times"]
            ms = "  ".join(f"{k} {statistics.median(t[k, shape]) * 1e3:6.1f}" for k in ("before", "after", "variable"))
            after_before = paired(t["after", shape], t["before", shape])
            after_var = paired(t["after", shape], t["variable", shape])
            before_var = paired(t["before", shape], t["variable", shape])
            print(
                f"  {shape:6s} {ms}   after/before {after_before:.3f}  after/variable {after_var:.3f}  "
                f"before/variable {before_var:.3f}"
            )
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
