"""The compiled static-shape target (``--backend compile``) against the eager fast path, side by side.

    python benchmarks/compiled.py [--methods vanilla eagle3] [--prompts 4] [--new-tokens 64] [--threads 2]
                                  [--hf] [--json out.json] [--compiled static|aot] [--speculate always|auto]

Two copies of SmolLM2-135M-Instruct: one on the eager ``"auto"`` backend (oneDNN-packed linears), one on
``"compile"`` (:mod:`specdec.compiled`: static cache, bucketed trees, inductor with frozen weights). Prints:

* the compile time of each bucket (:meth:`HFTarget.warm_up`; a second run of this script reads inductor's cache);
  with ``--compiled aot`` the compiled path is the model's ahead-of-time package (:mod:`specdec.backends.aot`: built
  in the first bucket's time if this machine has none, else loaded there);
* per method, tokens/s of each path on the same MT-bench questions at T=0, run alternately prompt by prompt (so a
  noisy machine slows both alike), the ratio compiled / eager, τ, and whether the tokens are the same;
* with ``--hf``, HF ``generate`` on the stock model, run in the same alternation as the vanilla rows;
* with ``--speculate auto``, each speculative generator keeps one :class:`~specdec.pace.Pace` across the prompts
  (each cycle a speculative one or a plain step, whichever has emitted more tokens per second so far);
* each method's tokens/s over its own path's vanilla (when ``vanilla`` runs first).

On the compiled path the drafters follow the target (:func:`specdec.drafters.eagle_steps.draft_backend`: on a CPU the
EAGLE heads stay eager on int8 weights, with CUDA graphs they are compiled), with the deferred tree budget (one host
sync per cycle) on CUDA, the budget reading this cycle's values elsewhere (the defaults, as on the eager path). Every
shape is compiled before timing (:func:`specdec.warm.warm_up`), then one untimed generation per path warms the rest.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from specdec.assets import chat_ids, mtbench_prompts
from specdec.bench.baselines import HFGenerate
from specdec.generate import StopCondition
from specdec.methods import MethodOptions, build_method
from specdec.methods import method as method_record
from specdec.models import load_smollm2
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.warm import warm_up


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=["vanilla", "eagle3"])
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--max-len", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--hf", action="store_true", help="HF generate beside the vanilla rows")
    parser.add_argument("--json", default=None, help="also write the figures here")
    parser.add_argument("--compiled", choices=("static", "aot"), default="static", help="how the compiled path runs")
    parser.add_argument("--speculate", choices=("always", "auto"), default="always", help="see the docstring")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    sampling = SamplingParams(temperature=0.0)
    stop = StopCondition(max_new_tokens=args.new_tokens)
    eager_model, tokenizer = load_smollm2()
    compiled_model, _ = load_smollm2()
    ids = [chat_ids(tokenizer, p) for p in mtbench_prompts()[: args.prompts]]
    paths = {
        "eager": HFTarget(eager_model, max_len=args.max_len, weights="auto", static_shapes=False),
        "compiled": HFTarget(
            compiled_model, max_len=args.max_len, static_shapes="aot" if args.compiled == "aot" else True
        ),
    }
    print(f"threads={args.threads} prompts={args.prompts} new_tokens={args.new_tokens} max_len={args.max_len}")
    out: dict = {"threads": args.threads, "prompts": args.prompts, "new_tokens": args.new_tokens, "methods": {}}
    vanilla: dict[str, float] = {}
    for method in args.methods:
        options = {"eager": MethodOptions(), "compiled": MethodOptions()}  # deferred budget: the default (CUDA only)
        gens = {name: build_method(method, t, method_record(method).narrow(options[name])) for name, t in paths.items()}
        compile_s = paths["compiled"].warm_up()  # compiles each bucket once (later methods reuse the graphs)
        if compile_s and "compile_seconds" not in out:
            out["compile_seconds"] = compile_s
            print("compile s per bucket: " + ", ".join(f"{b}: {s:.1f}" for b, s in compile_s.items()))
        print(f"  warm_up {method}: {warm_up(gens['compiled'], sampling):.1f} s")  # the drafter's shapes too
        if args.hf and method == "vanilla":
            gens["hf"] = HFGenerate(eager_model, tokenizer.eos_token_id)
        for gen in gens.values():  # warm-up (the adaptive budget's cost curve, caches, the drafter's graphs)
            start = time.perf_counter()
            gen.generate(ids[0], sampling, StopCondition(max_new_tokens=32))
            execution = getattr(getattr(gen, "drafter", None), "execution", None)  # a composite has none
            print(f"  warm-up {method} {execution.label if execution else ''}: {time.perf_counter() - start:.1f} s")
        # one pace per generator, as speculate="auto" builds it (HF generate has none)
        auto = args.speculate == "auto"
        paces = {n: getattr(g, "auto_pace", lambda: "always")() if auto else "always" for n, g in gens.items()}
        seconds = dict.fromkeys(gens, 0.0)
        tokens = dict.fromkeys(gens, 0)
        forwards = dict.fromkeys(gens, 0)
        emitted: dict[str, list[list[int]]] = {name: [] for name in gens}
        for x in ids:
            for name, gen in gens.items():
                start = time.perf_counter()
                extra = {"speculate": paces[name]} if name != "hf" else {}
                result = gen.generate(x, sampling, stop, **extra)
                seconds[name] += time.perf_counter() - start
                tokens[name] += len(result.tokens)
                forwards[name] += result.metrics.cycles + 1
                emitted[name].append(result.tokens)
        rate = {name: tokens[name] / seconds[name] for name in gens}
        if method == "vanilla":
            vanilla = dict(rate)
        row = {
            "tokens_per_s": rate,
            "compiled_over_eager": rate["compiled"] / rate["eager"],
            "tau": {name: tokens[name] / forwards[name] for name in paths},  # HF generate reports no cycles
            "same_tokens": sum(a == b for a, b in zip(emitted["eager"], emitted["compiled"], strict=True)),
            "over_own_vanilla": {name: rate[name] / vanilla[name] for name in paths if name in vanilla},
        }
        if "hf" in rate:
            row["hf_tokens_per_s"] = rate["hf"]
            print(
                f"hf-generate {rate['hf']:6.1f} tok/s  (vanilla eager {rate['eager'] / rate['hf']:.2f}x, compiled "
                f"{rate['compiled'] / rate['hf']:.2f}x)"
            )
        out["methods"][method] = row
        print(
            f"{method:8s} eager {rate['eager']:6.1f} tok/s  compiled {rate['compiled']:6.1f} tok/s  "
            f"ratio {row['compiled_over_eager']:.2f}  tau {row['tau']['eager']:.2f}/{row['tau']['compiled']:.2f}  "
            f"same tokens {row['same_tokens']}/{len(ids)}  over own vanilla "
            + " / ".join(f"{name} {r:.2f}x" for name, r in row["over_own_vanilla"].items())
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
