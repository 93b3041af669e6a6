"""The AMX kernel's rows in stacked chunks, pipelined, against today's kernel (issue 45), one process.

    python docs/results/2026-12-01-levers-intel-f6m207/amx_chunked.py   # amx_chunked.txt

``amx_chunked_kernel.cpp`` after ``skinny_amx.cpp``'s helpers as of ``e5e506d`` (built here as
``specdec_proto::amx``): rows in chunks of at most 5 stacked in one tile
(h, m and l parts adjacent), so 6-16 rows take one tile product per chunk and tile of codes instead of three; the
next chunk's product issued before the last one's sums are stored and added (two sets of tiles); codes converted three
blocks ahead. Per SmolLM2 shape (Q4_1 codes two a byte, ``amx4``), rows 1-16: outputs checked bitwise against
``specdec::skinny_linear_amx`` (and each row alone), then both timed warm, interleaved, 15 rounds, median ratio.
Then an ablation of the prototype: the same call without converting codes (stale tiles), without the float32
epilogue, and without both, to see where a call's time goes.
"""

import statistics
import time

import torch
from prototype import HERE, build, source_at

from specdec.backends import skinny
from specdec.backends.skinny_amx import amx_layout, amx_synthetic

SHAPES = {"q/o": (576, 576), "gate/up": (1536, 576), "down": (576, 1536), "vocab": (49152, 576)}


def timed(op, args: tuple, reps: int) -> float:
    start = time.perf_counter()
    for _ in range(reps):
        op(*args)
    return (time.perf_counter() - start) / reps


def main() -> None:
    skinny.load()
    helpers = source_at("e5e506d", "specdec/backends/skinny_amx.cpp")
    helpers = helpers[: helpers.index("// Rows [0, M) of x")].replace("bool amx_ready()", "bool amx_ready_p()")
    build("amxproto", {"proto.cpp": helpers + (HERE / "amx_chunked_kernel.cpp").read_text()})
    torch.set_num_threads(2)
    g = torch.Generator().manual_seed(0)
    old, new = torch.ops.specdec.skinny_linear_amx, torch.ops.specdec_proto.amx
    print("chunked / today's kernel, warm, median of 15 interleaved rounds")
    for name, (n, k) in SHAPES.items():
        q, d, m, small = amx_layout(amx_synthetic(n, k, g, "amx4"), "amx4")
        b = torch.randn(n)
        reps = 10 if n > 10000 else 100
        cells = []
        for rows in (1, 2, 5, 6, 8, 12, 16):
            x = torch.randn(rows, k, generator=g)
            x[0, :5] = torch.tensor([1e-30, -3.0, 0.0, 7.5e5, 1e-12])
            y = old(x, q, d, m, b, small)
            assert torch.equal(new(x, q, d, m, b, small), y), (name, rows)
            assert all(torch.equal(new(x[r : r + 1], q, d, m, b, small), y[r : r + 1]) for r in range(rows))
            t = {"old": [], "new": []}
            for _ in range(15):
                t["old"].append(timed(old, (x, q, d, m, None, small), reps))
                t["new"].append(timed(new, (x, q, d, m, None, small), reps))
            base = statistics.median(t["old"])
            cells.append(f"{rows}: {base * 1e6:5.0f} us x{statistics.median(t['new']) / base:.2f}")
        print(f"  {name:8s} bitwise equal; " + "  ".join(cells), flush=True)
    print("prototype ablation, us per call (median of 9): all / no code conversion / no epilogue / neither")
    for name in ("gate/up", "down"):
        n, k = SHAPES[name]
        q, d, m, small = amx_layout(amx_synthetic(n, k, g, "amx4"), "amx4")
        for rows in (1, 8):
            x = torch.randn(rows, k, generator=g)
            cells = []
            for mode in (0, 1, 2, 3):
                torch.ops.specdec_proto.mode(mode)
                cells.append(statistics.median(timed(new, (x, q, d, m, None, small), 300) for _ in range(9)))
            torch.ops.specdec_proto.mode(0)
            print(f"  {name:8s} {rows} rows: " + " / ".join(f"{c * 1e6:.0f}" for c in cells), flush=True)


if __name__ == "__main__":
    main()
