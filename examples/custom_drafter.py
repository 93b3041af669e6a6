"""Write a new drafter: a bigram model of the running context, checked, then plugged into the loop.

    python examples/custom_drafter.py                   # tiny random Llama, seconds
    python examples/custom_drafter.py --model smollm2   # SmolLM2-135M-Instruct

A drafter answers one question, many times per cycle: "given the committed context and this tree node's
path, what is q, the draft distribution of the next token?" Here q(x | last token) comes from bigram counts
of everything committed so far. Tutorial: docs/tutorials/custom_drafter.md
"""

from __future__ import annotations

import argparse

import torch

from specdec import (
    Drafter,
    DynamicTreePolicy,
    HFTarget,
    NGramDrafter,
    PartialTree,
    SamplingParams,
    SpeculativeGenerator,
    StochasticTreePolicy,
    StopCondition,
    TargetHidden,
    VanillaGenerator,
)
from specdec.models import tiny_llama
from specdec.testing import E2EReport, e2e_check


class BigramDrafter(Drafter):
    """q(next | last token) from add-``alpha`` bigram counts of the context: one method, :meth:`expand`.

    Token-level and training-free: ``hidden_request`` stays empty, so the target computes no extra features, and
    the base class keeps the committed tokens (``history``; :meth:`~specdec.interfaces.Drafter.contexts` adds each
    node's root path). The proposals are a deterministic function of that context, which is the contract of the
    top-k tree policies and their one-hot-q verifiers; a sampled tree draws from this q and records it.

    Args:
        vocab_size: the target's vocabulary size.
        alpha: pseudo-count of every bigram (keeps q strictly positive).
    """

    def __init__(self, vocab_size: int, alpha: float = 0.1) -> None:
        self.vocab_size = vocab_size
        self.alpha = alpha
        self.reset()

    def expand(self, tree: PartialTree, frontier: torch.Tensor) -> torch.Tensor:
        """``[F, V]`` logits: log(alpha + how often each token followed the context's last token)."""
        rows = []
        for context in self.contexts(tree, frontier):  # committed tokens + the node's root path, [n] long
            followers = context[1:][context[:-1] == context[-1]]
            counts = torch.bincount(followers, minlength=self.vocab_size).float()
            rows.append(torch.log(counts + self.alpha))
        return torch.stack(rows).to(tree.device)


def check_drafter(drafter: Drafter, vocab_size: int) -> None:
    """The contract the engine relies on: shapes, finite rows, and the same q for the same context."""
    drafter.reset()
    drafter.prefill(torch.tensor([1, 2, 3, 1, 2]), TargetHidden())
    tree = PartialTree(torch.tensor(3), capacity=8)
    root = drafter.expand(tree, torch.tensor([0]))
    assert root.shape == (1, vocab_size), root.shape
    kids = tree.add(torch.tensor([0, 0]), torch.tensor([1, 2]), torch.zeros(2))
    level = drafter.expand(tree, kids)
    assert level.shape == (2, vocab_size) and torch.isfinite(level).all()
    again = drafter.expand(tree, kids)
    assert torch.equal(level, again), "q must be a function of the context (deterministic candidates)"


def check_lossless(vocab_size: int = 6, n_samples: int = 600) -> E2EReport:
    """The testing kit on this drafter's pipeline: a sampled tree at T = 1 against the exact distribution of the
    target's first 3 tokens (enumerated, so no second sampler is trusted), G-test at level 1e-3. The kit also plants
    a bug in the same pipeline (a verifier that ignores q) and runs the same check on it: the report's verdict is
    ``"pass"`` only if the pipeline fits *and* that bug would have been caught (``controls=True`` plants every
    applicable bug; it costs one more sampled check per bug here, where the tree is sampled)."""
    model = tiny_llama(vocab_size=vocab_size, hidden_size=16, num_layers=2, logit_scale=1.5, seed=1)
    target, prompt = HFTarget(model, max_len=64), torch.tensor([1, 2, 3, 1, 2, 3, 1, 2])
    policy = StochasticTreePolicy([[0], [1], [0, 0]])  # children drawn from the bigram q
    good = SpeculativeGenerator(target, BigramDrafter(vocab_size), policy)
    sampling = SamplingParams(temperature=1.0)
    return e2e_check(good, model, prompt, sampling, n_samples, n_tokens=3, seed=0, controls=["IgnoresQVerifier"])


def load(model_name: str):
    if model_name == "tiny":
        model = tiny_llama(vocab_size=32, hidden_size=32, num_layers=4, num_heads=4, num_kv_heads=2, logit_scale=4.0)
        return model, torch.tensor([1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2]), [], 512
    from specdec.assets import chat_ids
    from specdec.models import load_smollm2

    model, tokenizer = load_smollm2()
    ids = chat_ids(tokenizer, "Repeat the word 'banana' ten times, separated by commas.")
    return model, ids, [tokenizer.eos_token_id], 2048


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["tiny", "smollm2"], default="tiny")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--samples", type=int, default=600, help="runs sampled by each lossless check")
    args = parser.parse_args(argv)

    model, prompt, eos, max_len = load(args.model)
    target = HFTarget(model, max_len=max_len)
    check_drafter(BigramDrafter(target.vocab_size), target.vocab_size)
    print("contract check: shapes, finite logits, deterministic q: ok")
    report = check_lossless(n_samples=args.samples)
    print(f"lossless at T=1 (sampled tree, exact 3-token distribution): {report.summary()}")

    stop = StopCondition(max_new_tokens=args.max_new_tokens, eos_token_ids=eos)
    policy = DynamicTreePolicy(topk=4, depth=4, total_tokens=16)
    for temperature in (0.0, 0.8):
        sampling = SamplingParams(temperature=temperature, seed=0)
        base = VanillaGenerator(target).generate(prompt, sampling, stop)
        for drafter in (BigramDrafter(target.vocab_size), NGramDrafter(target.vocab_size)):
            result = SpeculativeGenerator(target, drafter, policy).generate(prompt, sampling, stop)
            line = f"T={temperature} {type(drafter).__name__:<14} tau={result.metrics.tau:.2f}"
            if sampling.greedy:
                line += f"  identical to vanilla greedy: {'yes' if result.tokens == base.tokens else 'NO'}"
            else:
                line += f"  {len(result.tokens)} tokens (same distribution as vanilla, not the same draws)"
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
