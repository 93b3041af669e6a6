"""EAGLE-3 with fp32-packed against int8 draft weights, beside our vanilla loop and HF ``generate``, in one run.

    python benchmarks/draft_backends.py [--first 8] [--prompts 12] [--new-tokens 96] [--threads 2]

The target runs on the fast path in both EAGLE-3 rows; only the drafter's backend differs
(``MethodOptions(draft_weights="packed")`` vs the default ``"auto"``, which is int8 for draft weights). HF
``generate`` runs on a stock copy of the model. All four are interleaved per prompt, with the order rotated.
Printed per method: tokens/s, mean τ, mean draft share, and the ratio to HF ``generate``. The script also asserts
that every greedy output equals vanilla's.
"""

from __future__ import annotations

import argparse

import torch

from specdec.assets import chat_ids, mtbench_prompts
from specdec.bench.runner import HFGenerate
from specdec.generate import StopCondition
from specdec.methods import MethodOptions, build_method
from specdec.models import load_smollm2
from specdec.sampling import SamplingParams
from specdec.target import HFTarget


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first", type=int, default=8, help="first MT-bench question (index)")
    parser.add_argument("--prompts", type=int, default=12)
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tokenizer = load_smollm2()
    stock = model  # HF generate runs the model as loaded; our target runs a transformed copy
    target = HFTarget(model, max_len=1024)
    sampling = SamplingParams()
    gens = {
        "vanilla": build_method("vanilla", target),
        "eagle3 fp32 draft": build_method("eagle3", target, MethodOptions(draft_weights="packed")),
        "eagle3 int8 draft": build_method("eagle3", target, MethodOptions()),
        "hf-generate": HFGenerate(stock, tokenizer.eos_token_id),
    }
    stop = StopCondition(max_new_tokens=args.new_tokens, eos_token_ids=[tokenizer.eos_token_id])
    totals = {k: [0, 0.0, [], []] for k in gens}
    for i, prompt in enumerate(mtbench_prompts()[args.first : args.first + args.prompts]):
        ids = chat_ids(tokenizer, prompt)
        order = list(gens.items())
        order = order[i % len(order) :] + order[: i % len(order)]
        outputs = {}
        for name, gen in order:
            if i == 0:
                gen.generate(ids, sampling, StopCondition(max_new_tokens=4))
            result = gen.generate(ids, sampling, stop)
            t = totals[name]
            t[0] += len(result.tokens)
            t[1] += result.metrics.time_total
            if name != "hf-generate":
                t[2].append(result.metrics.tau)
                t[3].append(result.metrics.time_split()["draft"])
            outputs[name] = result.tokens
        if any(tokens != outputs["vanilla"] for tokens in outputs.values()):
            raise AssertionError(f"{prompt.id}: a greedy output differs from vanilla")
    hf = totals["hf-generate"][0] / totals["hf-generate"][1]
    setting = f"T=0, {args.new_tokens} tokens, {args.threads} threads"
    print(f"{args.prompts} MT-bench questions from index {args.first}, {setting}")
    for name, (n, seconds, taus, drafts) in totals.items():
        extra = f"tau {sum(taus) / len(taus):.2f}  draft {sum(drafts) / len(drafts):5.1%}" if taus else " " * 23
        print(f"  {name:18s} {n / seconds:6.2f} tok/s  {extra}  x HF generate {n / seconds / hf:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
