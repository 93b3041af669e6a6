"""Vanilla and adaptive-tree methods (T=0) with the depth chosen level by level or from the previous cycle.

Usage: levels_ab.py QUESTIONS NEW_TOKENS [METHODS, comma-separated; default eagle3]. Every configuration runs on
each MT-bench prompt in turn, so machine drift hits all alike; ratios are tokens/s over vanilla's in the same run.
"M cycle" is method M's policy with ``by_level`` off (the depth of the previous cycle's best plan plus one level of
look-ahead, the rule before level-by-level stops).
"""

import sys
import time
from collections import Counter, defaultdict

import torch

from specdec.assets import chat_ids, mtbench_prompts
from specdec.generate import StopCondition
from specdec.methods import build_method
from specdec.models import load_smollm2
from specdec.sampling import SamplingParams
from specdec.target import HFTarget


def main() -> None:
    questions, new_tokens = int(sys.argv[1]), int(sys.argv[2])
    torch.set_num_threads(2)
    model, tok = load_smollm2()
    target = HFTarget(model, backend="auto")
    s = SamplingParams(temperature=0.0)
    ids = [chat_ids(tok, p) for p in mtbench_prompts()[:questions]]
    methods = sys.argv[3].split(",") if len(sys.argv) > 3 else ["eagle3"]
    gens = {"vanilla": build_method("vanilla", target, s)}
    for method in methods:
        gens[f"{method} level"] = build_method(method, target, s)
        gens[f"{method} cycle"] = build_method(method, target, s)
        gens[f"{method} cycle"].policy.by_level = False
    levels = {name: Counter() for name in gens if name != "vanilla"}
    for name in levels:
        grow = gens[name].policy.grow

        def counted(*args, _grow=grow, _name=name, **kwargs):
            tree = _grow(*args, **kwargs)
            levels[_name][gens[_name].policy.last_levels] += 1
            return tree

        gens[name].policy.grow = counted
    for gen in gens.values():
        gen.generate(ids[0], s, StopCondition(max_new_tokens=8))
    for counter in levels.values():
        counter.clear()
    acc = defaultdict(lambda: defaultdict(float))
    outputs = defaultdict(list)
    for x in ids:
        for name, gen in gens.items():
            t0 = time.perf_counter()
            r = gen.generate(x, s, StopCondition(max_new_tokens=new_tokens))
            a, m = acc[name], r.metrics
            a["wall"] += time.perf_counter() - t0
            a["tokens"] += len(r.tokens)
            a["cycles"] += m.cycles
            a["acc"] += sum(m.accept_lengths)
            for phase in ("draft", "target", "verify", "bookkeeping"):
                a[phase] += getattr(m, f"time_{phase}")
            outputs[name].append(r.tokens)
    vanilla = acc["vanilla"]["tokens"] / acc["vanilla"]["wall"]
    for name, a in acc.items():
        tps, c = a["tokens"] / a["wall"], max(a["cycles"], 1)
        cycle = sum(a[p] for p in ("draft", "target", "verify", "bookkeeping"))
        same = sum(o == v for o, v in zip(outputs[name], outputs["vanilla"], strict=True))
        print(
            f"{name:14s} tau {1 + a['acc'] / c:.3f} tok/s {tps:5.1f} x vanilla {tps / vanilla:.3f} "
            f"draft {1e3 * a['draft'] / c:.2f} ms/cycle ({a['draft'] / max(cycle, 1e-9):.1%} of the cycle) "
            f"target {1e3 * a['target'] / c:.2f} ms greedy = vanilla {same}/{len(ids)} "
            f"levels {sorted(levels.get(name, {}).items())}",
            flush=True,
        )


if __name__ == "__main__":
    main()
