"""Issue 49: where a batched cycle's time goes at 4 rows, per pace arm (``step``, or trees of N nodes a row), greedy,
the first 4 MT-bench prompts x ``argv[2]`` tokens: summed per-row phase times (draft, bookkeeping) and the batch's
forward and verification per cycle (each row holds the batch's time: divided by 4)."""

import sys
import time

import torch

from specdec.assets import chat_ids, mtbench_prompts
from specdec.generate import StopCondition
from specdec.methods import build_method
from specdec.models import load_smollm2
from specdec.pace import STEP, Fixed
from specdec.sampling import SamplingParams
from specdec.target import HFTarget

torch.set_num_threads(2)
model, tok = load_smollm2()
target = HFTarget(model, max_len=1024, static_shapes=False)
ids = [chat_ids(tok, p.text) for p in mtbench_prompts()[:8]]
gen = build_method("eagle3", target)
stop = StopCondition(max_new_tokens=int(sys.argv[2]) if len(sys.argv) > 2 else 64)
gen.generate_batch(ids[:2], None, StopCondition(max_new_tokens=8))
greedy = SamplingParams(temperature=0.0, seed=0)
keys = ["time_prefill", "time_draft", "time_target", "time_verify", "time_bookkeeping"]
for arm in sys.argv[1].split(","):
    t = time.perf_counter()
    res = gen.generate_batch(ids[:4], greedy, stop, max_batch=4, speculate=Fixed(STEP if arm == "step" else int(arm)))
    wall = time.perf_counter() - t
    tot = {k: sum(getattr(r.metrics, k) for r in res) for k in keys}
    cycles = max(len(r.metrics.accept_lengths) for r in res)
    tau = sum(len(r.tokens) for r in res) / sum(len(r.metrics.accept_lengths) for r in res)
    print(f"arm {arm}: wall {wall:.2f}s tokens {sum(len(r.tokens) for r in res)} cycles {cycles} tau {tau:.2f}")
    per = {k: v / cycles * 1000 for k, v in tot.items()}
    print(
        f"  per cycle ms: draft {per['time_draft']:.2f} target {per['time_target'] / 4:.2f} "
        f"verify {per['time_verify'] / 4:.2f} book {per['time_bookkeeping']:.2f}"
    )
    print(f"  wall per cycle ms {wall / cycles * 1000:.2f} prefill total {tot['time_prefill']:.2f}s")
