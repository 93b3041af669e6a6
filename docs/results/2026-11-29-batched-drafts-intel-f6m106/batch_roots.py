"""Batched decoding with the rows' EAGLE root steps in one head forward (``Drafter.expand_roots``, the default) against
each row's root step run alone (the loop's call patched out, as before the change): vanilla, EAGLE-3 and the composite
at each batch size on the same target, one process, the sides interleaved per round (the order reversed every other
round). ``speculate="auto"`` (the batched default: the loop steps where speculating pays less) and ``"always"``; with
each, the drafting time per speculative cycle of the batch (every row's draft phase, the rows' root steps included).
Greedy: every row's tokens against batched vanilla's.

    .venv/bin/python docs/results/2026-11-29-batched-drafts-intel-f6m106/batch_roots.py [--prompts 8] [--rounds 2]
"""

import argparse
import time
from unittest import mock

import torch

from specdec import HFTarget, SamplingParams, StopCondition, build_method, chat_ids
from specdec.assets import mtbench_prompts
from specdec.backends.cpu import cpu_name
from specdec.models import load_smollm2
from specdec.pace import Pace

parser = argparse.ArgumentParser()
parser.add_argument("--prompts", type=int, default=8)
parser.add_argument("--new-tokens", type=int, default=128)
parser.add_argument("--batch-sizes", type=int, nargs="+", default=[4, 8])
parser.add_argument("--rounds", type=int, default=2)
parser.add_argument("--speculate", nargs="+", default=["auto", "always"])
args = parser.parse_args()
torch.set_num_threads(2)
model, tok = load_smollm2()
ids = [chat_ids(tok, p).tolist() for p in mtbench_prompts()[: args.prompts]]
target = HFTarget(model, max_len=max(map(len, ids)) + args.new_tokens + 80, static_shapes=False)
print(f"cpu={cpu_name()} threads=2 {target.execution.label}: {target.execution.describe()}", flush=True)
gens = {name: build_method(name, target) for name in ("vanilla", "eagle3", "composite")}
stop, greedy = StopCondition(max_new_tokens=args.new_tokens), SamplingParams(temperature=0.0)
for gen in gens.values():  # cost curves and first-call costs outside the timed runs
    gen.generate_batch(ids[:2], greedy, StopCondition(max_new_tokens=8), max_batch=2)

sides = [("vanilla", "-", "auto")] + [
    (m, roots, s) for m in ("eagle3", "composite") for roots in ("together", "alone") for s in args.speculate
]
totals: dict = {}
speculative = [0]  # the batch's speculative cycles (Pace.record's flag, once per cycle)
record = Pace.record


def counted(self, speculated, tokens, seconds):
    speculative[0] += speculated
    return record(self, speculated, tokens, seconds)


Pace.record = counted
for batch in args.batch_sizes:
    reference = None
    for r in range(args.rounds):
        for name, roots, speculate in sides if r % 2 == 0 else sides[::-1]:
            patch = mock.patch("specdec.batched._Batch._expand_roots", lambda self, indices, timer: None)
            if roots == "alone":
                patch.start()
            try:
                speculative[0] = 0
                t = time.perf_counter()
                res = gens[name].generate_batch(ids, greedy, stop, max_batch=batch, speculate=speculate)
                wall = time.perf_counter() - t
            finally:
                if roots == "alone":
                    patch.stop()
            tokens = [x.tokens for x in res]
            reference = reference or (tokens if name == "vanilla" else None)
            forwards = sum(len(x.metrics.accept_lengths) for x in res)
            cell = totals.setdefault((batch, name, roots, speculate), [0, 0.0, 0, 0, True, 0.0, 0])
            cell[0] += sum(map(len, tokens))
            cell[1] += wall
            cell[2] += forwards
            cell[3] += sum(len(t) for t in tokens) - len(res)  # the first token of each row is the prefill's
            cell[4] &= reference is None or tokens == reference
            cell[5] += sum(x.metrics.time_draft for x in res)
            cell[6] += speculative[0]
    base = totals[(batch, "vanilla", "-", "auto")]
    print(f"batch {batch} ({args.prompts} MT-bench prompts x {args.new_tokens} tokens, {args.rounds} rounds):")
    for name, roots, speculate in sides:
        n, wall, forwards, decoded, same, draft, cycles = totals[(batch, name, roots, speculate)]
        drafting = f"{1e3 * draft / cycles:5.1f} ms" if cycles else "   -    "
        ratio = (n / wall) / (base[0] / base[1])
        print(
            f"  {name:9s} roots {roots:8s} speculate={speculate:6s} {n / wall:6.1f} tok/s  {ratio:5.3f}x batched "
            f"vanilla  tokens per row-forward {decoded / forwards:4.2f}  drafting per speculative cycle {drafting}  "
            f"greedy = vanilla: {same}",
            flush=True,
        )
