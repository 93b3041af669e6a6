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

from specdec import Drafter, PartialTree, SamplingParams, TargetHidden
from specdec.drafters import NGramDrafter
from specdec.generate import SpeculativeGenerator, StopCondition, VanillaGenerator
from specdec.models import tiny_llama
from specdec.target import HFTarget
from specdec.trees import DynamicTreePolicy
from specdec.verify import default_verifier


class BigramDrafter(Drafter):
    """q(next | last token) from add-``alpha`` bigram counts of the committed tokens.

    Token-level and training-free: ``hidden_request`` stays empty, so the target computes no extra features.
    The proposals are a deterministic function of the context (committed tokens + the node's root path), which
    is the contract of the top-k tree policies and their one-hot-q verifiers.

    Args:
        vocab_size: the target's vocabulary size.
        alpha: pseudo-count of every bigram (keeps q strictly positive).
    """

    def __init__(self, vocab_size: int, alpha: float = 0.1) -> None:
        self.vocab_size = vocab_size
        self.alpha = alpha
        self.reset()

    def reset(self) -> None:
        self.counts = torch.zeros(self.vocab_size, self.vocab_size)  # [V, V]: counts[a, b] = #(a followed by b)
        self.last = torch.zeros(0, dtype=torch.long)  # the last committed token ([0] or [1])

    def _count(self, tokens: torch.Tensor) -> None:
        seq = torch.cat([self.last, tokens.reshape(-1).to("cpu", torch.long)])
        self.counts.index_put_((seq[:-1], seq[1:]), torch.ones(seq.shape[0] - 1), accumulate=True)
        self.last = seq[-1:]

    def prefill(self, input_ids: torch.Tensor, hidden: TargetHidden) -> None:
        """Count the prompt ``[L]``."""
        self.reset()
        self._count(input_ids)

    def commit(self, tokens: torch.Tensor, hidden: TargetHidden) -> None:
        """Count ``[k]`` = root + accepted tokens, the tokens the target kept this cycle."""
        self._count(tokens)

    def expand(self, tree: PartialTree, frontier: torch.Tensor) -> torch.Tensor:
        """``[F, V]`` logits. A node's context ends with its own token, so q only needs ``tree.tokens[node]``."""
        last = tree.tokens[frontier].cpu()  # [F]
        return torch.log(self.counts[last] + self.alpha).to(tree.device)


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
    args = parser.parse_args(argv)

    model, prompt, eos, max_len = load(args.model)
    target = HFTarget(model, max_len=max_len)
    check_drafter(BigramDrafter(target.vocab_size), target.vocab_size)
    print("contract check: shapes, finite logits, deterministic q: ok")

    stop = StopCondition(max_new_tokens=args.max_new_tokens, eos_token_ids=eos)
    policy = DynamicTreePolicy(topk=4, depth=4, total_tokens=16)
    for temperature in (0.0, 0.8):
        sampling = SamplingParams(temperature=temperature, seed=0)
        verifier = default_verifier(tree_is_stochastic=False, temperature=temperature)
        base = VanillaGenerator(target).generate(prompt, sampling, stop)
        for drafter in (BigramDrafter(target.vocab_size), NGramDrafter(target.vocab_size)):
            result = SpeculativeGenerator(target, drafter, policy, verifier).generate(prompt, sampling, stop)
            line = f"T={temperature} {type(drafter).__name__:<14} tau={result.metrics.tau:.2f}"
            if sampling.greedy:
                line += f"  identical to vanilla greedy: {'yes' if result.tokens == base.tokens else 'NO'}"
            else:
                line += f"  {len(result.tokens)} tokens (same distribution as vanilla, not the same draws)"
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
