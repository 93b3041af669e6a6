"""Core-engine ratios measured side by side in one run (SmolLM2-135M-Instruct, CPU by default).

    python benchmarks/core.py [--prompts 4] [--new-tokens 64] [--threads 2] [--out results.json]

1. Vanilla loop vs HF ``generate`` (greedy, static-size budget, no EOS stop), interleaved per prompt:
   prints ``vanilla/hf_generate`` tokens/s ratio (target >= 1.0).
2. Overhead of a speculative cycle with a 32-node dynamic tree: the share of cycle time spent outside
   model forwards (tree building, verification, commit, bookkeeping); model forwards (target and drafter
   model) are timed with forward hooks. Target <= 10 %.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import time
from pathlib import Path

import torch

from specdec.assets import chat_ids, mtbench_prompts
from specdec.drafters import SmallLMDrafter
from specdec.generate import SpeculativeGenerator, StopCondition, VanillaGenerator
from specdec.models import load_smollm2
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.trees import DynamicTreePolicy
from specdec.verify import GreedyVerifier


class ForwardTimer:
    """Accumulates wall time spent inside the forward of the given modules (top level only)."""

    def __init__(self, *modules: torch.nn.Module) -> None:
        self.seconds = 0.0
        self._start = 0.0
        self._depth = 0
        for m in modules:
            m.register_forward_pre_hook(self._pre)
            m.register_forward_hook(self._post)

    def _pre(self, *_):
        if self._depth == 0:
            self._start = time.perf_counter()
        self._depth += 1

    def _post(self, *_):
        self._depth -= 1
        if self._depth == 0:
            self.seconds += time.perf_counter() - self._start


def vanilla_vs_hf(model, tokenizer, prompts, new_tokens: int) -> dict:
    target = HFTarget(model, max_len=1024)
    sampling = SamplingParams()
    stop = StopCondition(max_new_tokens=new_tokens)
    ours, hf = [], []
    # Both sides run exactly new_tokens greedy steps: no EOS stop (min_new_tokens would mask EOS and change argmax).
    no_eos = copy.deepcopy(model.generation_config)
    no_eos.update(eos_token_id=None, do_sample=False, min_new_tokens=None, pad_token_id=0)
    for i, prompt in enumerate(prompts):
        ids = chat_ids(tokenizer, prompt)
        if i == 0:  # warm-up both
            VanillaGenerator(target).generate(ids, sampling, StopCondition(max_new_tokens=4))
            with torch.no_grad():
                model.generate(ids[None], generation_config=no_eos, max_new_tokens=4)
        t = time.perf_counter()
        ours_tokens = VanillaGenerator(target).generate(ids, sampling, stop).tokens
        ours.append(len(ours_tokens) / (time.perf_counter() - t))
        t = time.perf_counter()
        with torch.no_grad():
            out = model.generate(ids[None], generation_config=no_eos, max_new_tokens=new_tokens)
        hf.append((out.shape[1] - ids.shape[0]) / (time.perf_counter() - t))
        same = out[0, ids.shape[0] :].tolist() == ours_tokens
        print(f"  prompt {i}: ours {ours[-1]:.1f} tok/s, HF generate {hf[-1]:.1f} tok/s, same tokens: {same}")
    ratio = sum(ours) / sum(hf)
    return {"vanilla_tok_s": sum(ours) / len(ours), "hf_generate_tok_s": sum(hf) / len(hf), "ratio": ratio}


def cycle_overhead(model, tokenizer, prompts, new_tokens: int, tree_size: int) -> dict:
    target = HFTarget(model, max_len=1024)
    drafter = SmallLMDrafter.from_target_layers(model, 2, max_len=1024)
    policy = DynamicTreePolicy(topk=8, depth=5, total_tokens=tree_size)
    gen = SpeculativeGenerator(target, drafter, policy, GreedyVerifier())
    timer = ForwardTimer(model, drafter.model)
    sampling = SamplingParams()
    cycle_time = model_time = 0.0
    sizes: list[int] = []
    for i, prompt in enumerate(prompts):
        ids = chat_ids(tokenizer, prompt)
        if i == 0:
            gen.generate(ids, sampling, StopCondition(max_new_tokens=8))
        timer.seconds = 0.0
        result = gen.generate(ids, sampling, StopCondition(max_new_tokens=new_tokens))
        m = result.metrics
        model_time += timer.seconds - 0.0
        cycle_time += m.time_total
        sizes += m.tree_sizes
        # the prefill forward is model time inside time_total too; both sides include it
    outside = 1.0 - model_time / cycle_time
    return {
        "tree_nodes_mean": sum(sizes) / len(sizes),
        "tree_nodes_max": max(sizes),
        "cycle_seconds_total": cycle_time,
        "model_forward_seconds": model_time,
        "outside_model_fraction": outside,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tree-size", type=int, default=32)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tokenizer = load_smollm2()
    prompts = mtbench_prompts()[: args.prompts]
    print(
        f"device=cpu threads={args.threads} torch={torch.__version__} cpu={platform.processor() or platform.machine()}"
    )
    print("1) vanilla loop vs HF generate (greedy, same prompts, interleaved)")
    a = vanilla_vs_hf(model, tokenizer, prompts, args.new_tokens)
    print(f"   ratio vanilla/hf_generate = {a['ratio']:.2f}  (target >= 1.0)")
    print(f"2) time outside model forwards, dynamic tree of {args.tree_size} nodes, small-LM drafter")
    b = cycle_overhead(model, tokenizer, prompts, args.new_tokens, args.tree_size)
    print(
        f"   outside-model fraction = {b['outside_model_fraction']:.1%} of decode time "
        f"(mean tree {b['tree_nodes_mean']:.1f} nodes; target <= 10%)"
    )
    if args.out:
        args.out.write_text(json.dumps({"vanilla_vs_hf": a, "overhead": b, "threads": args.threads}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
