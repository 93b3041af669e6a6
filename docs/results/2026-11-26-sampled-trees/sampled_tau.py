"""Per-cycle cost and tau of sampled trees vs the same shapes with top-k children (EAGLE-3 head), run one after another.

Usage: sampled_tau.py QUESTIONS NEW_TOKENS TEMPERATURE SHAPES [topk] [adaptive] (SHAPES comma-separated names below).
Rows: the EAGLE-3 adaptive top-k tree ("adaptive"), each shape with sampled children ("-sampled") and, with "topk",
with its top-k children ("-topk"). Prints tau, nodes per tree, and verify / draft milliseconds per cycle.
"""

import sys
import time

import torch

from specdec.assets import chat_ids, mtbench_prompts
from specdec.generate import SpeculativeGenerator, StopCondition
from specdec.methods import MethodOptions, build_method, eagle_drafter
from specdec.models import load_smollm2
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.trees import StaticTreePolicy, StochasticTreePolicy
from specdec.verify import default_verifier

SHAPES = {
    "chain3": [[0], [0, 0], [0, 0, 0]],
    "t6": [[0], [1], [0, 0], [1, 0], [0, 0, 0]],
    "t8": [[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0]],
    "t12": [[0], [1], [2], [0, 0], [0, 1], [1, 0], [2, 0], [0, 0, 0], [0, 1, 0], [1, 0, 0], [0, 0, 0, 0]],
}


def main() -> None:
    questions, new_tokens, temperature = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    torch.set_num_threads(2)
    model, tok = load_smollm2()
    target = HFTarget(model, backend="auto")
    s = SamplingParams(temperature=temperature)
    ids = [chat_ids(tok, p) for p in mtbench_prompts()[:questions]]
    gens = {}
    if "adaptive" in sys.argv[5:]:
        gens["adaptive"] = build_method("eagle3", target, s, MethodOptions(sampled_tree=None))
    drafter = eagle_drafter(target, "eagle3")
    for name in sys.argv[4].split(","):
        for kind, policy in (("sampled", StochasticTreePolicy(SHAPES[name])), ("topk", StaticTreePolicy(SHAPES[name]))):
            if kind == "topk" and "topk" not in sys.argv[5:]:
                continue
            width = max(level.width for level in policy.levels) if kind == "topk" else None
            width = max(level.width for level in policy.shape.levels) if kind == "sampled" else width
            verifier = default_verifier(kind == "sampled", temperature, width, chain=policy.is_chain)
            gens[f"{name}-{kind}"] = SpeculativeGenerator(target, drafter, policy, verifier)
    for name, gen in gens.items():
        tokens = cycles = accepted = nodes = 0
        verify = draft = 0.0
        t0 = time.perf_counter()
        for i, x in enumerate(ids):
            r = gen.generate(x, s, StopCondition(max_new_tokens=new_tokens), torch.Generator().manual_seed(i))
            m = r.metrics
            tokens, cycles, accepted = tokens + len(r.tokens), cycles + m.cycles, accepted + sum(m.accept_lengths)
            nodes, verify, draft = nodes + sum(m.tree_sizes), verify + m.time_verify, draft + m.time_draft
        wall = time.perf_counter() - t0
        print(
            f"{name:16s} {type(gen.verifier).__name__:28s} tau {1 + accepted / cycles:.3f} nodes {nodes / cycles:5.1f} "
            f"verify {1e3 * verify / cycles:6.2f} ms draft {1e3 * draft / cycles:5.2f} ms tok/s {tokens / wall:.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
