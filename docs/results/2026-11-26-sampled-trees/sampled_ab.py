"""T > 0: vanilla, EAGLE-3 with its adaptive top-k tree, and EAGLE-3 with sampled static trees, interleaved per prompt.

Usage: sampled_ab.py QUESTIONS NEW_TOKENS TEMPERATURE SHAPES (comma-separated names of SHAPES below). Every
configuration runs on each prompt in turn (same seed per prompt), so machine drift hits all alike; the printed
ratios are tokens/s over vanilla's in the same run.
"""

import sys
import time
from collections import defaultdict

import torch

from specdec.assets import chat_ids, mtbench_prompts
from specdec.generate import SpeculativeGenerator, StopCondition
from specdec.methods import MethodOptions, build_method, eagle_drafter
from specdec.models import load_smollm2
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.trees import StochasticTreePolicy
from specdec.verify import default_verifier

SHAPES = {
    "chain2": [[0], [0, 0]],
    "r3": [[0], [1], [2]],
    "r2x": [[0], [1], [0, 0], [0, 1]],
    "r3d": [[0], [1], [2], [0, 0], [1, 0]],
    "t6": [[0], [1], [0, 0], [1, 0], [0, 0, 0]],
    "r4d": [[0], [1], [2], [3], [0, 0], [1, 0]],
}


def main() -> None:
    questions, new_tokens, temperature = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    torch.set_num_threads(2)
    model, tok = load_smollm2()
    target = HFTarget(model, backend="auto")
    s = SamplingParams(temperature=temperature)
    ids = [chat_ids(tok, p) for p in mtbench_prompts()[:questions]]
    gens = {
        "vanilla": build_method("vanilla", target, s),
        "adaptive": build_method("eagle3", target, s, MethodOptions(sampled_tree=None)),
    }
    drafter = eagle_drafter(target, "eagle3")
    for name in sys.argv[4].split(","):
        policy = StochasticTreePolicy(SHAPES[name])
        width = max(level.width for level in policy.shape.levels)
        gens[name] = SpeculativeGenerator(target, drafter, policy, default_verifier(True, temperature, width))
    gens["vanilla"].generate(ids[0], s, StopCondition(max_new_tokens=4))
    acc = defaultdict(lambda: defaultdict(float))
    for i, x in enumerate(ids):
        for name, gen in gens.items():
            t0 = time.perf_counter()
            r = gen.generate(x, s, StopCondition(max_new_tokens=new_tokens), torch.Generator().manual_seed(i))
            a, m = acc[name], r.metrics
            a["wall"] += time.perf_counter() - t0
            a["tokens"] += len(r.tokens)
            a["cycles"] += m.cycles
            a["acc"] += sum(m.accept_lengths)
            a["draft"] += m.time_draft
            a["verify"] += m.time_verify
    vanilla = acc["vanilla"]["tokens"] / acc["vanilla"]["wall"]
    for name, a in acc.items():
        tps, c = a["tokens"] / a["wall"], max(a["cycles"], 1)
        print(
            f"{name:10s} tau {1 + a['acc'] / c:.3f} tok/s {tps:5.1f} x vanilla {tps / vanilla:.3f} "
            f"draft {1e3 * a['draft'] / c:.2f} ms verify {1e3 * a['verify'] / c:.2f} ms",
            flush=True,
        )


if __name__ == "__main__":
    main()
