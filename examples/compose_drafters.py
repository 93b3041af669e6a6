"""Compose two drafters in one tree: a model drafter's tree plus a retrieval drafter's continuation.

    python examples/compose_drafters.py                        # tiny random Llama: seconds, tokens are ids
    python examples/compose_drafters.py --temperature 1.0      # sampled: draws beside point masses
    python examples/compose_drafters.py --model smollm2        # SmolLM2 + the shipped EAGLE-3 head, a translation

Tutorial: docs/tutorials/compose_drafters.md
"""

from __future__ import annotations

import argparse

import torch

from specdec import (
    ByTemperature,
    CompositeDrafter,
    CompositeTreePolicy,
    DynamicTreePolicy,
    HFTarget,
    RetrievalDrafter,
    SamplingParams,
    SmallLMDrafter,
    SpeculativeGenerator,
    StochasticTreePolicy,
    StopCondition,
    VanillaGenerator,
)

MAX_LEN = 512  # cache: prompt + new tokens + one tree
PROMPT = "Translate German to English: Der Bericht wurde gestern veröffentlicht. Der Bericht ist lang."


def parts(model_name: str, max_len: int):
    """``(target, tree drafter, prompt ids [L], eos ids)``: a small-LM drafter on the tiny model, EAGLE-3 on SmolLM2."""
    if model_name == "tiny":
        from specdec.models import tiny_llama

        model = tiny_llama(vocab_size=16, hidden_size=16, num_layers=4, seed=3)  # its greedy text falls into a loop
        target = HFTarget(model, max_len=max_len)
        return target, SmallLMDrafter.from_target(target, 2), torch.tensor([1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2]), []
    from specdec.assets import chat_ids
    from specdec.methods import eagle_drafter
    from specdec.models import load_smollm2

    model, tokenizer = load_smollm2()
    target = HFTarget(model, max_len=max_len)
    return target, eagle_drafter(target, "eagle3"), chat_ids(tokenizer, PROMPT), [tokenizer.eos_token_id]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["tiny", "smollm2"], default="tiny")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    args = parser.parse_args(argv)

    target, model_drafter, prompt, eos = parts(args.model, max_len=MAX_LEN)
    retrieval = RetrievalDrafter.from_target(target, max_draft=8, min_match=2)  # a suffix automaton of the context
    drafter = CompositeDrafter.for_target(target, model_drafter, [retrieval])  # each part checked against the target
    base = ByTemperature(  # the model drafter's own tree: top-k at T = 0, sampled at T > 0
        DynamicTreePolicy(topk=4, depth=4, total_tokens=16), StochasticTreePolicy([(0,), (1,), (2,), (0, 0), (1, 0)])
    )
    policy = CompositeTreePolicy(base, max_draft=8, min_prob=0.2)  # adds the continuation where it pays
    generator = SpeculativeGenerator(target, drafter, policy)

    sampling = SamplingParams(temperature=args.temperature, seed=0)
    stop = StopCondition(max_new_tokens=args.max_new_tokens, eos_token_ids=eos)
    _, verifier = generator.parts_for(sampling)
    print(f"pipeline: {drafter!r} -> {policy!r} -> {type(verifier).__name__}")
    added: list[int] = []  # retrieval nodes per cycle
    grow = policy.grow

    def counted(*args):
        tree = grow(*args)
        added.append(policy.last_added)
        return tree

    policy.grow = counted
    result = generator.generate(prompt, sampling, stop)
    m = result.metrics
    print(f"tokens: {result.tokens}")
    print(f"tau: {m.tau:.2f} tokens per target forward, {len(m.accept_lengths)} cycles")
    print(f"retrieval nodes: {sum(added)} added in {sum(a > 0 for a in added)} of {len(added)} cycles")
    print(f"longest accepted path: {max(m.accept_lengths)} draft tokens (the model drafter's tree is 4 deep)")

    alone = SpeculativeGenerator(HFTarget(target.model, max_len=MAX_LEN), model_drafter, base)
    m_alone = alone.generate(prompt, sampling, stop).metrics
    print(f"model drafter alone: tau {m_alone.tau:.2f}")
    if sampling.greedy:
        vanilla = VanillaGenerator(HFTarget(target.model, max_len=MAX_LEN)).generate(prompt, sampling, stop)
        print(f"identical to vanilla greedy: {'yes' if vanilla.tokens == result.tokens else 'NO'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
