"""SmolLM2's eager float32 target (``weights="auto"``: its few-row attention on ``specdec::skinny_attention``) with the
attention kernel before this session's changes against the checkout's, one process (issue 45).

    python docs/results/2026-12-01-levers-intel-f6m207/eager_forwards_ab.py   # eager_forwards_ab.txt

The kernel at ``b8faac3~1`` is built beside the library (``attention_gather_ab.build_before``) and the two are
swapped as ``torch.ops.specdec.skinny_attention`` (the name the attention function calls) between forwards. After a
250-token prompt, forwards of 1-16 rows, the sides interleaved, 11 passes, medians; the 8-row logits of both sides
must be bitwise equal.
"""

import statistics
import time

import torch
from attention_gather_ab import build_before

from specdec.backends import skinny
from specdec.models import load_smollm2
from specdec.target import HFTarget

ROWS, CONTEXT, PASSES = (1, 2, 4, 8, 16), 250, 11


def main() -> None:
    skinny.load()
    build_before()
    torch.set_num_threads(2)
    ops = {"before": torch.ops.specdec_before.skinny_attention, "after": torch.ops.specdec.skinny_attention}
    model, _ = load_smollm2()
    target = HFTarget(model, max_len=2048)
    print(target.execution.describe())
    ids = torch.arange(CONTEXT + max(ROWS)) % 1000 + 100
    target.runner.forward(ids[:CONTEXT], torch.arange(CONTEXT), 0)
    calls = []

    def counted(op):
        def call(*args):
            calls.append(1)
            return op(*args)

        return call

    counting = {side: counted(op) for side, op in ops.items()}
    ms = {side: {n: [] for n in ROWS} for side in ops}
    logits = {}
    for _ in range(PASSES):
        for n in ROWS:
            for side in ops:
                torch.ops.specdec.skinny_attention = counting[side]
                start = time.perf_counter()
                out = target.runner.forward(ids[CONTEXT : CONTEXT + n], torch.arange(CONTEXT, CONTEXT + n), CONTEXT)
                ms[side][n].append((time.perf_counter() - start) * 1e3)
                if n == 8:
                    logits[side] = out[0].float()
    torch.ops.specdec.skinny_attention = ops["after"]
    print(f"attention calls through the swapped op: {len(calls)}")
    for side in ops:
        print(f"{side:6s} ms  " + "  ".join(f"{n}: {statistics.median(v[1:]):5.2f}" for n, v in ms[side].items()))
    ratio = "  ".join(
        f"{n}: {statistics.median(ms['after'][n][1:]) / statistics.median(ms['before'][n][1:]):.3f}" for n in ROWS
    )
    print(f"after / before  {ratio}")
    print(f"8-row logits bitwise equal: {torch.equal(logits['before'], logits['after'])}")


if __name__ == "__main__":
    main()
