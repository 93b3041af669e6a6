"""A prompt's prefill rows on the AMX kernel with each tile of codes converted once for all 16-row passes, against
today's kernel (one pass after another, converting again), one process (issue 45).

    python docs/results/2026-12-01-levers-intel-f6m207/amx_passes.py   # amx_passes.txt

``amx_passes_kernel.cpp`` after ``skinny_amx.cpp`` as of ``0d7034a`` (its helpers and kernels; built here as
``specdec_passes::amx``): the same per-row work in the same order (outputs checked bitwise equal), passes innermost.
SmolLM2's shapes, both code forms, 16-300 rows, warm, interleaved, medians of 7.
"""

import statistics
import time

import torch
from prototype import HERE, build, source_at

from specdec.backends import skinny
from specdec.backends.skinny_amx import amx_layout, amx_synthetic

SHAPES = {"q/o": (576, 576), "gate/up": (1536, 576), "down": (576, 1536)}


def main() -> None:
    skinny.load()
    source = source_at("0d7034a", "specdec/backends/skinny_amx.cpp")
    kernel = (HERE / "amx_passes_kernel.cpp").read_text()
    build("amx_passes", {"passes.cpp": source[: source.index("at::Tensor skinny_linear_amx(")] + kernel})
    torch.set_num_threads(2)
    g = torch.Generator().manual_seed(0)
    ops = (torch.ops.specdec.skinny_linear_amx, torch.ops.specdec_passes.amx)
    print("us per call, today's kernel -> codes converted once for all passes")
    for name, (n, k) in SHAPES.items():
        for form in ("amx4", "amx8"):
            q, d, m, small = amx_layout(amx_synthetic(n, k, g, form), form)
            b = torch.randn(n)
            cells = []
            for rows in (16, 32, 100, 300):
                x = torch.randn(rows, k, generator=g)
                assert torch.equal(ops[0](x, q, d, m, b, small), ops[1](x, q, d, m, b, small)), (name, form, rows)
                t = ([], [])
                for _ in range(7):
                    for side, op in enumerate(ops):
                        start = time.perf_counter()
                        for _ in range(10):
                            op(x, q, d, m, None, small)
                        t[side].append((time.perf_counter() - start) / 10)
                before, after = statistics.median(t[0]), statistics.median(t[1])
                cells.append(f"{rows}: {before * 1e6:5.0f} -> {after * 1e6:5.0f} (x{after / before:.2f})")
            print(f"  {name:8s} {form} bitwise equal; " + "  ".join(cells), flush=True)


if __name__ == "__main__":
    main()
