"""The few-row attention before and after this session's changes, one process (issue 45).

    python docs/results/2026-12-01-levers-intel-f6m207/attention_gather_ab.py [REV]   # attention_gather_ab.txt

REV (default ``b8faac3~1``, before both) is the kernel compared against the checkout's: ``b8faac3`` gathers each row
chunk's keys once per call, ``4bf0548`` computes the AVX-512 scores' horizontal sums across keys. The kernel at REV
(its ``skinny_attention.cpp`` and ``skinny_attention_impl.h``) is built beside the library under another op name
(``specdec_before::skinny_attention``); both run SmolLM2's shapes (9 query heads over 3 key/value heads of 64, 300
visible keys then the rows' own, causal) in caches of 320, 1024 and 2048 slots, outputs checked bitwise equal, then
timed interleaved, 15 rounds of 50 calls, medians.
"""

import statistics
import sys
import time

import torch
from prototype import build, source_at

from specdec.backends import skinny

BEFORE = sys.argv[1] if len(sys.argv) > 1 else "b8faac3~1"


def build_before() -> None:
    source = source_at(BEFORE, "specdec/backends/skinny_attention.cpp")
    source = source[: source.index("// The C shim an ahead-of-time package calls")]
    source += (
        'TORCH_LIBRARY(specdec_before, m) { m.def("skinny_attention(Tensor q, Tensor k, Tensor v, Tensor? mask, '
        'float scale, int isa=0) -> Tensor"); }\n'
        'TORCH_LIBRARY_IMPL(specdec_before, CPU, m) { m.impl("skinny_attention", &skinny_attention); }\n'
    )
    header = source_at(BEFORE, "specdec/backends/skinny_attention_impl.h")
    build("attention_before", {"before.cpp": source, "skinny_attention_impl.h": header})


def main() -> None:
    skinny.load()
    build_before()
    torch.set_num_threads(2)
    ops = {"before": torch.ops.specdec_before.skinny_attention, "after": torch.ops.specdec.skinny_attention}
    print(f"us per call, {BEFORE} -> this checkout (2 threads, warm)")
    for span in (320, 1024, 2048):
        cells = []
        for rows in (1, 2, 4, 8, 16):
            q, k, v = torch.randn(1, 9, rows, 64), torch.randn(1, 3, span, 64), torch.randn(1, 3, span, 64)
            mask = torch.full((1, 1, rows, span), float("-inf"))
            mask[..., :300] = 0
            mask[0, 0, :, 300 : 300 + rows] = torch.where(torch.tril(torch.ones(rows, rows)) > 0, 0.0, float("-inf"))
            args = (q, k, v, mask, 0.125, 0)
            assert torch.equal(ops["before"](*args), ops["after"](*args))
            t = {side: [] for side in ops}
            for _ in range(15):
                for side, op in ops.items():
                    start = time.perf_counter()
                    for _ in range(50):
                        op(*args)
                    t[side].append((time.perf_counter() - start) / 50)
            before, after = statistics.median(t["before"]), statistics.median(t["after"])
            cells.append(f"{rows}: {before * 1e6:4.0f} -> {after * 1e6:4.0f}")
        print(f"  {span:4d} slots, bitwise equal;  " + "   ".join(cells), flush=True)


if __name__ == "__main__":
    main()
