"""Retrieval with and without a corpus of the target's own text, side by side in one process (Spec-Bench).

For each prompt (``--per-family`` questions of each Spec-Bench family, round-robin) every generator runs once, in
alternating order: vanilla, then each method of ``--methods`` as it is and with ``MethodOptions(corpus=...)``
(``+corpus`` rows). Prints tokens/s against vanilla overall and per family, tokens per target forward (τ), whether
greedy output equals vanilla's on every prompt, and what indexing the corpus cost (seconds, resident memory).

    specdec data corpus --data data/self-distilled/smollm2-135m-instruct --out /tmp/smollm2-greedy.safetensors
    python benchmarks/retrieval_corpus.py --corpus /tmp/smollm2-greedy.safetensors --per-family 5 --out r.json
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import torch

from specdec import HFTarget, SamplingParams, StopCondition, build_method, chat_ids
from specdec.assets import select_prompts, spec_bench_prompts
from specdec.backends.cpu import cpu_name
from specdec.methods import MethodOptions, load_corpus
from specdec.models import load_smollm2


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=["retrieval", "composite"])
    parser.add_argument("--corpus", type=Path, required=True, help="a file from `specdec data corpus`")
    parser.add_argument("--per-family", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tokenizer = load_smollm2()
    prompts = select_prompts(spec_bench_prompts(), args.per_family)
    longest = max(len(chat_ids(tokenizer, p)) for p in prompts)
    target = HFTarget(model, max_len=longest + args.new_tokens + 72, in_place=True)  # + the largest tree (64) + 8
    before, t0 = _rss_mb(), time.perf_counter()
    load_corpus(args.corpus, target.vocab_size)
    index_s, index_mb = time.perf_counter() - t0, _rss_mb() - before
    print(f"cpu={cpu_name()} threads={args.threads} T={args.temperature}: {target.execution.describe()}")
    print(f"corpus {args.corpus}: indexed in {index_s:.1f} s, peak resident memory +{index_mb:.0f} MB")
    gens = {"vanilla": build_method("vanilla", target)}
    for name in args.methods:
        gens[name] = build_method(name, target)
        gens[f"{name}+corpus"] = build_method(name, target, MethodOptions(corpus=args.corpus))
    sampling = SamplingParams(temperature=args.temperature)
    stop = StopCondition(max_new_tokens=args.new_tokens)
    for gen in gens.values():  # first-call costs outside the timed runs
        gen.generate(chat_ids(tokenizer, prompts[0]), sampling.model_copy(update={"seed": 0}), StopCondition(8))
    seconds, tokens, forwards, same = ({k: 0.0 for k in gens} for _ in range(4))
    family_rate: dict[str, dict[str, list[float]]] = {}
    for i, prompt in enumerate(prompts):
        ids = chat_ids(tokenizer, prompt)
        seeded = sampling.model_copy(update={"seed": i})
        outs = {}
        for name in list(gens) if i % 2 == 0 else list(reversed(gens)):
            start = time.perf_counter()
            out = gens[name].generate(ids, seeded, stop)
            elapsed = time.perf_counter() - start
            seconds[name] += elapsed
            tokens[name] += len(out.tokens)
            forwards[name] += len(out.tokens) if name == "vanilla" else max(out.metrics.cycles, 1)
            outs[name] = list(out.tokens)
            cell = family_rate.setdefault(str(prompt.family), {}).setdefault(name, [0.0, 0.0])
            cell[0] += elapsed
            cell[1] += len(out.tokens)
        for name in gens:
            same[name] += outs[name] == outs["vanilla"]
        print(f"   {prompt.id}: done", flush=True)
    rate = {k: tokens[k] / seconds[k] for k in gens}
    print(f"prompts={len(prompts)} new_tokens={args.new_tokens}")
    for name in gens:
        greedy = f"  same as vanilla {int(same[name])}/{len(prompts)}" if args.temperature == 0 else ""
        print(
            f"   {name:18s} {rate[name]:6.2f} tok/s  {rate[name] / rate['vanilla']:.3f}x vanilla  "
            f"tau {tokens[name] / forwards[name]:.2f}{greedy}"
        )
    per_family = {
        family: {k: (v[1] / v[0]) / (cells["vanilla"][1] / cells["vanilla"][0]) for k, v in cells.items()}
        for family, cells in family_rate.items()
    }
    for family, ratios in per_family.items():
        print(f"   {family:14s} " + "  ".join(f"{k} {r:.2f}x" for k, r in ratios.items() if k != "vanilla"))
    if args.out:
        report = {
            "cpu": cpu_name(),
            "threads": args.threads,
            "temperature": args.temperature,
            "prompts": len(prompts),
            "new_tokens": args.new_tokens,
            "corpus": str(args.corpus),
            "index_seconds": index_s,
            "index_peak_rss_mb": index_mb,
            "tok_s": rate,
            "tau": {k: tokens[k] / forwards[k] for k in gens},
            "same_as_vanilla": same,
            "per_family_x_vanilla": per_family,
        }
        args.out.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
