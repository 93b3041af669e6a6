"""One process: SmolLM2's package exported at ``B = 1`` against the same forward exported with the batch dynamic (as
the batch package is), the same inputs: forwards of 1-16 rows of one sequence after a 250-token context at 512 slots,
interleaved (the order alternating each pass), medians of 30 passes; the logits compared at every row count.

    python docs/results/2026-12-02-batch-package-intel-f6m207/package_batch_ab.py ONE.pt2 BATCH.pt2

Both files from ``~/.cache/specdec/aot/`` (the ``-batch.pt2`` one is built by the first batched forward on the
package, e.g. ``benchmarks/batch_throughput.py --shapes aot``).
"""

import statistics
import sys
import time

import torch

from specdec.models import load_smollm2
from specdec.target import HFTarget

CONTEXT, SLOTS, ROWS, PASSES = 250, 512, (1, 2, 4, 8, 16), 31


def main() -> None:
    torch.set_num_threads(2)
    model, _ = load_smollm2()
    target = HFTarget(model, static_shapes="aot", max_len=2048)  # prepares the kernels the packages call
    target.warm_up()
    layout, cache = target.runner.layout, target.runner.cache
    one, batch = (torch._inductor.aoti_load_package(path) for path in sys.argv[1:3])
    g = torch.Generator().manual_seed(0)
    shape = cache.layers[0].keys.shape
    keys = [torch.randn(1, shape[1], SLOTS, shape[3], generator=g) * 0.5 for _ in cache.layers]
    values = [torch.randn(1, shape[1], SLOTS, shape[3], generator=g) * 0.5 for _ in cache.layers]
    write_pos = torch.tensor(CONTEXT)

    def inputs(n: int) -> tuple:
        ids = torch.randint(100, 5000, (1, n), generator=g)
        positions = torch.arange(CONTEXT, CONTEXT + n)[None]
        allowed = torch.zeros(n, SLOTS, dtype=torch.bool)
        allowed[:, :CONTEXT] = True
        allowed[:, CONTEXT : CONTEXT + n] = torch.ones(n, n, dtype=torch.bool).tril()
        return ids, positions, layout.mask(allowed, torch.arange(SLOTS), positions[0]), write_pos, keys, values

    equal = True
    for n in ROWS:
        x = inputs(n)
        equal &= torch.equal(one(*x)[0], batch(*x)[0])
    print("logits bitwise equal at every row count:", bool(equal), flush=True)
    ms = {(side, n): [] for side in ("one", "batch") for n in ROWS}
    for i in range(PASSES):
        for n in ROWS:
            x = inputs(n)
            for side, run in (("one", one), ("batch", batch)) if i % 2 else (("batch", batch), ("one", one)):
                start = time.perf_counter()
                run(*x)
                ms[side, n].append((time.perf_counter() - start) * 1e3)
    for n in ROWS:
        a, b = (statistics.median(ms[side, n][1:]) for side in ("one", "batch"))
        print(f"rows {n:2d}: B=1 package {a:6.2f} ms, dynamic-B package {b:6.2f} ms, ratio {b / a:.3f}", flush=True)


if __name__ == "__main__":
    main()
