"""Per cycle drafting, target and verification times of EAGLE-3 at T = 1 (MT-bench questions 9-11 x 128 tokens, one
process): r3d, the ranked tree (max 16 nodes, width 8) and a ranked tree of at most 12 nodes, width 4, depth 3."""

import torch

from specdec import HFTarget, SamplingParams, StopCondition, build_method, chat_ids
from specdec.assets import mtbench_prompts
from specdec.methods import MethodOptions
from specdec.models import load_smollm2

torch.set_num_threads(2)
model, tok = load_smollm2()
target = HFTarget(model, max_len=1024, in_place=True)
T1 = SamplingParams(temperature=1.0)
gens = {
    "r3d": build_method("eagle3", target, MethodOptions(sampled_tree="r3d")),
    "ranked8": build_method("eagle3", target, MethodOptions(sampled_tree="ranked")),
}
small = build_method("eagle3", target, MethodOptions(sampled_tree="ranked"))
policy = small.policy.for_sampling(T1)
policy.__init__(policy.curve, max_nodes=12, max_depth=3, max_width=4, draft_temperature_ratio=0.7)
gens["ranked4"] = small
totals = {k: [0.0] * 5 for k in gens}  # draft s, target s, verify s, cycles, tokens
stop = StopCondition(max_new_tokens=128, eos_token_ids=())
for i, p in enumerate(mtbench_prompts()[8:11]):
    ids = chat_ids(tok, p)
    for k, gen in gens.items():
        out = gen.generate(ids, T1.model_copy(update={"seed": i}), stop)
        m, t = out.metrics, totals[k]
        for j, v in enumerate((m.time_draft, m.time_target, m.time_verify, len(m.tree_sizes), len(out.tokens))):
            t[j] += v
for k, (draft, target_s, verify, cycles, tokens) in totals.items():
    print(
        f"{k:8s} per cycle ms: draft {draft / cycles * 1e3:.1f} target {target_s / cycles * 1e3:.1f} "
        f"verify {verify / cycles * 1e3:.1f}  tau {tokens / cycles:.2f}  "
        f"ms/token {(draft + target_s + verify) / tokens * 1e3:.1f}"
    )
