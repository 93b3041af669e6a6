"""The EAGLE-3 head's steps compiled on int8 weights against the eager head, on the package target, one process.

    python docs/results/2026-12-01-levers-intel-f6m207/head_compiled.py [per family] [new tokens]   # head_compiled.txt

Issue 45's lever from the last session: the head's ~150 small eager ops (norms, RoPE, copies; ~0.9 ms a step, run
cold after the target's forward) fused by inductor, its linears kept on int8 weights as the library's custom op
(``specdec::skinny_linear_w8`` inside the graph, not frozen float32). Sides, every one always speculating (so the
draft is timed every cycle), interleaved per prompt with the order rotated, greedy checked against vanilla:

* ``eager``: today's default (``draft_backend``: eager steps, each int8 linear on its measured kernel);
* ``static``: the drafter's static steps (padded buckets, attention over the whole buffer) compiled by inductor
  without freezing, every head linear ``W8Linear``;
* ``dynamic``: the eager steps' shapes, the head and its scorer compiled once with dynamic shapes
  (``torch.compile(dynamic=True, fullgraph=True)``), every head linear ``W8Linear``.
"""

import statistics
import sys

import torch

import specdec.drafters.eagle as eagle
import specdec.drafters.eagle3 as eagle3
from specdec.assets import chat_ids, select_prompts, spec_bench_prompts
from specdec.attention import additive_mask
from specdec.backends.skinny import W8Linear
from specdec.generate import StopCondition
from specdec.methods import build_method
from specdec.models import load_smollm2
from specdec.sampling import SamplingParams
from specdec.target import HFTarget

SIDE = {"now": "eager"}
_backend, _resolve, _compile, _int8, _step = (
    eagle3.draft_backend,
    eagle.resolve,
    eagle.compile_forward,
    eagle.draft_int8_linear,
    eagle.EagleDrafterBase._step,
)


def backend(target, weights):
    return ("int8", True) if SIDE["now"] == "static" else _backend(target, weights)


def resolve(model, weights, static_shapes, draft=False):
    return ("int8", True, "") if SIDE["now"] == "static" else _resolve(model, weights, static_shapes, draft=draft)


def int8_linear(linear, keep_weight=True):
    return _int8(linear, keep_weight) if SIDE["now"] == "eager" else W8Linear(linear, keep_weight=keep_weight)


def compile_unfrozen(model):
    if SIDE["now"] != "static":
        return _compile(model)
    compiled = torch.compile(model, fullgraph=True, dynamic=False)

    def run(*args, **kwargs):
        with torch._dynamo.config.patch(recompile_limit=64):
            return compiled(*args, **kwargs)

    return run


def step(self, compiled, tokens, hidden, positions, mask, cache, rows):
    dyn = getattr(self, "_dynamic", None)
    if dyn is None or compiled or not isinstance(mask, torch.Tensor):
        return _step(self, compiled, tokens, hidden, positions, mask, cache, rows)
    with torch._dynamo.config.patch(recompile_limit=64):
        bias = additive_mask(mask, self._dtype)
        return dyn(self.head.embed(tokens)[None], hidden[None], positions[None], bias, rows, cache)


def main() -> None:
    eagle3.draft_backend, eagle.resolve, eagle.draft_int8_linear = backend, resolve, int8_linear
    eagle.compile_forward, eagle.EagleDrafterBase._step = compile_unfrozen, step
    per_family = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    new_tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    torch.set_num_threads(2)
    model, tokenizer = load_smollm2()
    target = HFTarget(model, static_shapes="aot", max_len=2048)
    target.warm_up()
    gens = {"vanilla": build_method("vanilla", target)}
    for side in ("eager", "static", "dynamic"):
        SIDE["now"] = side
        gens[side] = build_method("eagle3", target)
    SIDE["now"] = "eager"
    drafter = gens["dynamic"].drafter
    drafter._dynamic = torch.compile(drafter._scored, dynamic=True, fullgraph=True)
    for side in ("eager", "static", "dynamic"):
        d = gens[side].drafter
        kinds = sorted({type(m).__name__ for m in d.head.modules() if "Linear" in type(m).__name__})
        print(f"{side}: static steps {d.static}, head linears {kinds}", flush=True)
    sampling = SamplingParams()
    stop = StopCondition(max_new_tokens=new_tokens, eos_token_ids=[tokenizer.eos_token_id])
    prompts = select_prompts(spec_bench_prompts(), per_family)
    speculate = {name: None if name == "vanilla" else "always" for name in gens}
    for name, gen in gens.items():  # compiles what the first prompts need before timing
        for prompt in prompts[:2]:
            gen.generate(chat_ids(tokenizer, prompt), sampling, stop, speculate=speculate[name])
    totals = {name: [0, 0.0, [], []] for name in gens}
    for i, prompt in enumerate(prompts):
        ids = chat_ids(tokenizer, prompt)
        order = list(gens.items())
        order = order[i % len(order) :] + order[: i % len(order)]
        outs = {}
        for name, gen in order:
            result = gen.generate(ids, sampling, stop, speculate=speculate[name])
            t = totals[name]
            t[0] += len(result.tokens)
            t[1] += result.metrics.time_total
            if name != "vanilla":
                t[2].append(result.metrics.tau)
                t[3].append(result.metrics.time_split()["draft"])
            outs[name] = result.tokens
        if any(o != outs["vanilla"] for o in outs.values()):
            raise AssertionError(f"{prompt.id}: a greedy output differs from vanilla")
    print(f"Spec-Bench {len(prompts)} x {new_tokens}, T = 0, greedy equal to vanilla on every prompt")
    base = totals["vanilla"][0] / totals["vanilla"][1]
    for name, (n, seconds, taus, drafts) in totals.items():
        extra = f"  tau {statistics.mean(taus):.2f}  draft {statistics.mean(drafts):5.1%}" if taus else ""
        print(f"  {name:8s} {n / seconds:6.2f} tok/s  x vanilla {n / seconds / base:.3f}{extra}")


if __name__ == "__main__":
    main()
