"""Compose a speculative pipeline from its parts, generate, and read the metrics.

    python examples/compose_pipeline.py                   # tiny random Llama: runs in seconds, tokens are ids
    python examples/compose_pipeline.py --model smollm2   # SmolLM2-135M-Instruct: real text, real speedup

Tutorial: docs/tutorials/compose_pipeline.md
"""

from __future__ import annotations

import argparse

import torch

from specdec import SamplingParams
from specdec.drafters import NGramDrafter, SmallLMDrafter
from specdec.generate import SpeculativeGenerator, StopCondition, VanillaGenerator
from specdec.models import tiny_llama
from specdec.target import HFTarget
from specdec.trees import DynamicTreePolicy
from specdec.verify import verifier_for

PROMPT = "Explain in three sentences why the sky is blue."


def load(model_name: str):
    """``(model, tokenizer or None, prompt_ids [L])``."""
    if model_name == "tiny":
        model = tiny_llama(vocab_size=32, hidden_size=32, num_layers=4, num_heads=4, num_kv_heads=2, logit_scale=4.0)
        return model, None, torch.tensor([1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2])
    from specdec.assets import chat_ids
    from specdec.models import load_smollm2

    model, tokenizer = load_smollm2()
    return model, tokenizer, chat_ids(tokenizer, PROMPT)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["tiny", "smollm2"], default="tiny")
    parser.add_argument("--drafter", choices=["small-lm", "ngram"], default="small-lm")
    parser.add_argument("--draft-layers", type=int, default=None, help="small-lm: target layers kept (tiny 2, else 6)")
    parser.add_argument("--topk", type=int, default=4)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--total-tokens", type=int, default=16, help="tree nodes verified per cycle, root included")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    model, tokenizer, prompt = load(args.model)
    max_len = 512 if args.model == "tiny" else 2048  # cache: prompt + new tokens + one tree
    target = HFTarget(model, max_len=max_len)  # p: the target distribution, one forward per cycle

    # q: the draft distribution. Both drafters share the target's vocabulary (checked by the generator).
    if args.drafter == "ngram":
        drafter = NGramDrafter(vocab_size=target.vocab_size)
    else:
        layers = args.draft_layers or (2 if args.model == "tiny" else 6)
        drafter = SmallLMDrafter.from_target_layers(model, layers, max_len=max_len)

    policy = DynamicTreePolicy(topk=args.topk, depth=args.depth, total_tokens=args.total_tokens)  # EAGLE-2 tree
    generator = SpeculativeGenerator(target, drafter, policy)  # the verifier follows each call's sampling

    sampling = SamplingParams(temperature=args.temperature, seed=args.seed)
    verifier = verifier_for(policy.kind(sampling), sampling)  # the one this call runs (top-k candidates: q one-hot)
    eos = [tokenizer.eos_token_id] if tokenizer is not None else []
    stop = StopCondition(max_new_tokens=args.max_new_tokens, eos_token_ids=eos)

    result = generator.generate(prompt, sampling, stop)
    m = result.metrics
    print(f"pipeline: {type(drafter).__name__} -> {type(policy).__name__} -> HFTarget -> {type(verifier).__name__}")
    print(f"tokens: {result.tokens}")
    if tokenizer is not None:
        print(f"text: {tokenizer.decode(result.tokens, skip_special_tokens=True).strip()}")
    print(f"finish: {result.finish_reason}")
    print(f"summary: {m.summary()}")
    print(f"tau: {m.tau:.2f} tokens per target forward (bonus included), {m.cycles} cycles after the prefill")
    print("acceptance per depth (n-alpha): " + " ".join(f"{a:.2f}" for a in m.acceptance_per_depth()))
    print(f"mean tree size: {sum(m.tree_sizes) / max(1, len(m.tree_sizes)):.1f} nodes")

    # The fair baseline: same adapter, same warp, same sampling settings, same run.
    base = VanillaGenerator(target).generate(prompt, sampling, stop)
    speedup = m.tokens_per_second / max(base.metrics.tokens_per_second, 1e-9)
    note = " (timings mean nothing on a tiny model)" if args.model == "tiny" else ""
    print(f"vanilla: {base.metrics.tokens_per_second:.1f} tok/s; speedup {speedup:.2f}x{note}")
    if sampling.greedy:
        print(f"identical to vanilla greedy: {'yes' if result.tokens == base.tokens else 'NO'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
