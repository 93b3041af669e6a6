"""Sampled trees at T > 0, each tree its own generator, interleaved per prompt in one process against vanilla.

    python benchmarks/sampled_trees.py [--trees r3d menu] [--method eagle3] [--weights auto|stock|packed]
                                       [--static-shapes auto|off|aot] [--prompts 8] [--new-tokens 128]
                                       [--temperature 1.0] [--top-p 1.0] [--threads 2] [--out results.json]

One SmolLM2-135M-Instruct target (float32) on ``--weights``: ``auto`` is the fast path; ``stock`` keeps the stock
linears, whose tree forwards grow with the number of tokens as on a CPU where small-row GEMMs are not flat.
``--trees`` names what ``--method`` draws at T > 0 (``MethodOptions.sampled_tree``): a shape of
``methods.SAMPLED_SHAPES``, ``menu`` (:class:`~specdec.trees.menu.SampledMenuPolicy`), ``off`` (the method's tree of
top-k candidates), or a shape of your own as ``NAME=PATHS`` with rank paths separated by commas and ranks by dots
(``r3d=0,1,2,0.0,1.0``); ``@RATIO`` after an entry draws at ``RATIO x T`` (``r3d@0.7``,
``MethodOptions.draft_temperature_ratio``), ``+gate`` at the end draws levels only where they pay
(``MethodOptions.sampled_level_gate``), and after everything ``~auto`` runs that tree under the generator's pace of
``speculate="auto"`` kept across the prompts (``SpeculativeGenerator.auto_pace``), ``~step`` under a pace that
speculates or steps, whichever has paid more, ``~sizes`` under one that also tries depth-1 trees of 2-4 nodes
(``pace.BATCH_SIZES``; these two with ``--pace-decay``), ``~steponly`` plain steps of the speculative loop alone,
``~explore24`` the sizes' pace exploring every 24th cycle instead of every 12th, ``~size2`` every cycle a depth-1
tree of 2 nodes.
``--static-shapes aot`` runs the target from its ahead-of-time package (built or loaded from the cache), ``off`` on the
eager fast path; ``auto`` (default) takes a cached package, as ``HFTarget`` does. For every MT-bench (or ``--dataset
spec-bench``) prompt (chat template, no EOS stop, the same seed for every tree) the generators run back to back, the
order alternating; printed are tokens/s and the ratio to vanilla, and tokens per target forward (tau). The target's cost
curve is printed too (the one every tree is priced by).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

import torch

from specdec import HFTarget, SamplingParams, StopCondition, build_method, chat_ids
from specdec.assets import load_prompts, select_prompts
from specdec.backends.cpu import cpu_name
from specdec.budget import forward_cost_curve
from specdec.methods import SAMPLED_SHAPES, MethodOptions
from specdec.models import load_smollm2
from specdec.pace import BATCH_SIZES, OWN, STEP, Fixed, Pace

#: ``~SUFFIX`` of a ``--trees`` entry: how its cycles are paced (``auto``: the generator's own ``speculate="auto"``).
PACES = {
    "step": lambda decay: Pace(decay=decay),
    "sizes": lambda decay: Pace(decay=decay, sizes=BATCH_SIZES),
    "steponly": lambda decay: Fixed(STEP),
    "explore24": lambda decay: Pace(decay=decay, sizes=BATCH_SIZES, explore_every=24),
    "size2": lambda decay: Fixed(2),
}


def tree_options(entry: str) -> tuple[str, MethodOptions]:
    """(label, options) of one ``--trees`` entry; a ``NAME=PATHS`` shape is registered."""
    label = entry
    entry, tilde, pace = entry.partition("~")
    entry, gate = (entry[: -len("+gate")], True) if entry.endswith("+gate") else (entry, False)
    entry, _, ratio = entry.partition("@")
    if "=" in entry:
        entry, paths = entry.split("=", 1)
        SAMPLED_SHAPES[entry] = tuple(tuple(int(r) for r in path.split(".")) for path in paths.split(","))
        label = entry + (f"@{ratio}" if ratio else "") + ("+gate" if gate else "") + tilde + pace
    tree = None if entry == "off" else entry
    given = {"sampled_tree": tree}
    if gate:
        given["sampled_level_gate"] = True
    if ratio:
        given["draft_temperature_ratio"] = float(ratio)
    return label, MethodOptions(**given)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", nargs="+", default=["r3d", "menu"])
    parser.add_argument("--method", default="eagle3")
    parser.add_argument("--weights", default="auto", choices=("auto", "stock", "packed"))
    parser.add_argument("--static-shapes", default="auto", choices=("auto", "off", "aot"))
    parser.add_argument("--pace-decay", type=float, default=0.8, help="Pace.decay of the ~step and ~sizes entries")
    parser.add_argument("--dataset", default="mtbench", help="mtbench, or spec-bench (--prompts per family)")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--skip", type=int, default=0, help="start at this MT-bench question")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tokenizer = load_smollm2()
    static = {"auto": "auto", "off": False, "aot": "aot"}[args.static_shapes]
    max_len = 2048 if args.dataset == "spec-bench" else 1024  # Spec-Bench's summaries run ~1,000 prompt tokens
    target = HFTarget(model, max_len=max_len, weights=args.weights, static_shapes=static, in_place=True)
    curve = forward_cost_curve(target)
    print(
        f"cpu={cpu_name()} threads={args.threads} T={args.temperature} top_p={args.top_p}: "
        f"{target.execution.describe()}"
    )
    ratios = (f"{n}: {sec / curve.seconds[0]:.2f}" for n, sec in zip(curve.sizes, curve.seconds, strict=True))
    print("cost curve T(n)/T(1): " + ", ".join(ratios))
    gens = {"vanilla": build_method("vanilla", target)}
    paces: dict[str, Pace | str] = {"vanilla": "always"}
    for entry in args.trees:
        label, options = tree_options(entry)
        gens[label] = build_method(args.method, target, options)
        pace = entry.partition("~")[2]
        if pace and pace != "auto" and pace not in PACES:
            parser.error(f"unknown pace ~{pace} in {entry!r}: choose auto, {', '.join(PACES)}")
        if pace == "auto":
            paces[label] = gens[label].auto_pace()
        else:
            paces[label] = PACES[pace](args.pace_decay) if pace else "always"
    stop = StopCondition(max_new_tokens=args.new_tokens, eos_token_ids=())
    if args.dataset == "spec-bench":  # the first --prompts of each family, interleaved
        prompts = select_prompts(load_prompts(args.dataset), args.prompts)
    else:
        prompts = load_prompts(args.dataset)[args.skip : args.skip + args.prompts]
    warm = chat_ids(tokenizer, prompts[0])
    sampling = SamplingParams(temperature=args.temperature, top_p=args.top_p)
    for gen in gens.values():  # first-call costs outside the timed runs
        gen.generate(warm, sampling.model_copy(update={"seed": 0}), StopCondition(max_new_tokens=8))
    seconds = dict.fromkeys(gens, 0.0)
    tokens = dict.fromkeys(gens, 0)
    forwards = dict.fromkeys(gens, 0)
    sizes: dict[str, list[int]] = {k: [] for k in gens}  # every cycle's tree size, root included
    for i, prompt in enumerate(prompts):
        ids = chat_ids(tokenizer, prompt)
        seeded = sampling.model_copy(update={"seed": i})
        order = list(gens) if i % 2 == 0 else list(reversed(gens))
        for name in order:
            t0 = time.perf_counter()
            out = gens[name].generate(ids, seeded, stop, speculate=paces[name])
            seconds[name] += time.perf_counter() - t0
            tokens[name] += len(out.tokens)
            forwards[name] += max(out.metrics.cycles, 1) if name != "vanilla" else len(out.tokens)
            sizes[name] += out.metrics.tree_sizes
        print(f"   {prompt.id}: done", flush=True)
    rate = {k: tokens[k] / seconds[k] for k in gens}
    print(f"method={args.method} prompts={len(prompts)} new_tokens={args.new_tokens}")
    for name in gens:
        print(
            f"   {name:10s} {rate[name]:6.2f} tok/s  {rate[name] / rate['vanilla']:.3f}x vanilla  "
            f"{tokens[name] / forwards[name]:.2f} tokens per target forward" + _sizes(sizes[name])
        )
    for name, pace in paces.items():
        if isinstance(pace, Pace):
            print(f"   {name}: " + _arms(pace))
    if args.out:
        report = {
            "cpu": cpu_name(),
            "method": args.method,
            "weights": args.weights,
            "temperature": args.temperature,
            "top_p": args.top_p,
            "curve": {"sizes": curve.sizes, "seconds": curve.seconds},
            "tok_s": rate,
            "tau": {k: tokens[k] / forwards[k] for k in gens},
            "tree_sizes": {k: dict(sorted(Counter(v).items())) for k, v in sizes.items() if v},
            "arms": {  # a paced entry's arms: undecayed [cycles, tokens, seconds] (Pace.totals)
                k: {str(arm): total for arm, total in pace.totals.items()}
                for k, pace in paces.items()
                if isinstance(pace, Pace)
            },
        }
        args.out.write_text(json.dumps(report, indent=2))
    return 0


def _arms(pace: Pace) -> str:
    """Each arm's share of the pace's cycles and its undecayed tokens per second over them."""
    cycles = sum(c for c, _, _ in pace.totals.values()) or 1
    names = {STEP: "step", OWN: "own"}
    return ", ".join(
        f"{names.get(arm, arm)} {c / cycles:.0%} of cycles {t / s if s else 0:.1f} tok/s"
        for arm, (c, t, s) in pace.totals.items()
    )


def _sizes(sizes: list[int]) -> str:
    """A tree's mean size (root included) and the share of root-only cycles, where cycles drew trees."""
    if not sizes:
        return ""
    return f"  (mean tree {sum(sizes) / len(sizes):.1f} nodes, root alone {sizes.count(1) / len(sizes):.0%})"


if __name__ == "__main__":
    raise SystemExit(main())
