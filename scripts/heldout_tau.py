"""Compare EAGLE heads on the training runs' held-out prompts, paired prompt by prompt.

    python scripts/heldout_tau.py specdec/heads/smollm2-135m-instruct/eagle3 /work/runs/e3-new/head \\
        --prompts 50 --new-tokens 128 --total-tokens 16 32 --out heldout_tau.json

The prompts are the held-out ShareGPT conversations of ``specdec train`` (same split, seed and truncation, up to
the first assistant token); SmolLM2 continues them greedily through the real decoding loop with EAGLE-2's dynamic
tree (top-k 8, depth 6, ``--total-tokens`` nodes), every head's weights rounded to bf16 as shipped. Every head
decodes the same prompts, so the difference of two heads' τ comes with a paired standard error over prompts (delta
method on the ratio of sums).
Never MT-bench: that set is kept for the final benchmark.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch

from specdec.checkpoints import load_eagle_head
from specdec.eagle.checks import check_head_target
from specdec.eagle.heads import Eagle1Head, Eagle3Head
from specdec.models import load_model
from specdec.train.data import load_sharegpt
from specdec.train.tau import heldout_prompts, tree_tau_counts
from specdec.trees import DynamicTreePolicy


def paired_difference(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> tuple[float, float]:
    """``τ_b - τ_a`` and its standard error over prompts, for per-prompt ``(tokens, forwards)`` pairs of two heads on
    the same prompts (linearised ratio of sums: each prompt contributes ``(t - τ f) / mean f``)."""
    n = len(a)
    ta, fa = sum(t for t, _ in a), sum(f for _, f in a)
    tb, fb = sum(t for t, _ in b), sum(f for _, f in b)
    tau_a, tau_b = ta / fa, tb / fb
    d = [(t2 - tau_b * f2) / (fb / n) - (t1 - tau_a * f1) / (fa / n) for (t1, f1), (t2, f2) in zip(a, b, strict=True)]
    mean = sum(d) / n
    if n < 2:
        return tau_b - tau_a, math.nan
    var = sum((x - mean) ** 2 for x in d) / (n - 1)
    return tau_b - tau_a, math.sqrt(var / n)


def as_shipped(path: str, model: torch.nn.Module) -> Eagle1Head | Eagle3Head:
    """The head at ``path`` with its weights rounded to bf16 (as :func:`specdec.train.card.ship_head` stores them),
    computing in fp32 like the target, with the target's embedding attached when it has none."""
    head = load_eagle_head(path, dtype=torch.bfloat16).float().eval()
    check_head_target(head, model)
    if head.embed_tokens is None:
        head.attach_target_embedding(model.get_input_embeddings().weight)
    return head


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("heads", nargs="+", help="head folders; the first is the baseline of the paired differences")
    p.add_argument("--prompts", type=int, default=50)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--total-tokens", type=int, nargs="+", default=[16, 32], help="tree sizes (root included)")
    p.add_argument("--max-len", type=int, default=1024, help="truncation of the held-out conversations (as trained)")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", type=Path, default=None, help="write every count and figure here (JSON)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_model("smollm2")
    _, heldout = load_sharegpt(tokenizer, max_conversations=0, max_len=args.max_len, max_heldout=args.prompts)
    prompts = heldout_prompts([{"input_ids": e.input_ids, "loss_mask": e.loss_mask} for e in heldout], args.prompts)
    print(f"{len(prompts)} held-out prompts, {args.new_tokens} new tokens each")
    heads = [as_shipped(h, model) for h in args.heads]
    report: dict = {"prompts": len(prompts), "new_tokens": args.new_tokens, "heads": args.heads, "trees": {}}
    for total in args.total_tokens:
        policy = DynamicTreePolicy(topk=8, depth=6, total_tokens=total)
        rows = []
        for name, head in zip(args.heads, heads, strict=True):
            t0 = time.perf_counter()
            counts = tree_tau_counts(head, model, prompts, args.new_tokens, policy)
            tau = sum(t for t, _ in counts) / sum(f for _, f in counts)
            rows.append({"head": name, "tau": tau, "counts": counts, "seconds": time.perf_counter() - t0})
            line = f"{total:3d} nodes  tau {tau:.3f}  {name}"
            if rows[0]["counts"] is not counts:
                diff, se = paired_difference(rows[0]["counts"], counts)
                rows[-1].update(diff=diff, se=se)
                line += f"   ({diff:+.3f} ± {se:.3f} vs the first)"
            print(line, flush=True)
        report["trees"][str(total)] = rows
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
