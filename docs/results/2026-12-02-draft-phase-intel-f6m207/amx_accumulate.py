"""The AMX form with the three bfloat16 parts accumulated in one tile, against the library's kernel (issue 45).

    python docs/results/2026-12-02-draft-phase-intel-f6m207/amx_accumulate.py   # amx_accumulate.txt

``amx_accumulate_kernel.cpp`` after ``skinny_amx.cpp``'s helpers (built here as ``specdec_proto::acc``): for every
row count the h, m and l parts sit in three tiles and their products go into one accumulator tile per output tile
(``C = 0 + sum h q + sum m q + sum l q``), so each block stores one tile of sums instead of three and the float32
epilogue reads one sum a row. The library stacks the three parts of at most 5 rows in one tile (one product) and
keeps them apart above that (three products, three stores). Per SmolLM2 shape (Q4_1 codes two a byte, ``amx4``),
1 to 300 rows: the largest difference from the library's outputs, each row alone against its row in the call, then
both timed warm, interleaved, 11 rounds, median ratio.
"""

import statistics
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "2026-12-01-levers-intel-f6m207"))
from prototype import build  # noqa: E402

from specdec.backends import skinny  # noqa: E402
from specdec.backends.skinny_amx import amx_layout, amx_synthetic  # noqa: E402

SHAPES = {"q/o": (576, 576), "k/v": (192, 576), "gate/up": (1536, 576), "down": (576, 1536), "vocab": (49152, 576)}
ROWS = (1, 2, 4, 5, 6, 8, 12, 16, 64, 300)


def timed(op, args: tuple, reps: int) -> float:
    start = time.perf_counter()
    for _ in range(reps):
        op(*args)
    return (time.perf_counter() - start) / reps


def main() -> None:
    skinny.load()
    src = (HERE.parents[2] / "specdec/backends/skinny_amx.cpp").read_text()
    helpers = src[: src.index("// Rows [0, M) of x")].replace("bool amx_ready()", "bool amx_ready_p()")
    build("accproto", {"proto.cpp": helpers + (HERE / "amx_accumulate_kernel.cpp").read_text()})
    torch.set_num_threads(2)
    g = torch.Generator().manual_seed(0)
    old, new = torch.ops.specdec.skinny_linear_amx, torch.ops.specdec_proto.acc
    print("accumulated in one tile / the library's kernel (amx4), warm, median of 11 interleaved rounds")
    for name, (n, k) in SHAPES.items():
        q, d, m, small = amx_layout(amx_synthetic(n, k, g, "amx4"), "amx4")
        reps = 5 if n > 10000 else 60
        cells, diffs = [], []
        for rows in ROWS:
            if n > 10000 and rows > 16:
                continue
            x = torch.randn(rows, k, generator=g)
            y, z = old(x, q, d, m, None, small), new(x, q, d, m, None, small)
            assert all(torch.equal(new(x[r : r + 1], q, d, m, None, small), z[r : r + 1]) for r in range(rows))
            diffs.append(((z - y).abs().max() / y.abs().max()).item())
            per = reps if rows <= 16 else max(2, reps // 10)
            t = {"old": [], "new": []}
            for _ in range(11):
                t["old"].append(timed(old, (x, q, d, m, None, small), per))
                t["new"].append(timed(new, (x, q, d, m, None, small), per))
            base = statistics.median(t["old"])
            cells.append(f"{rows}: {base * 1e6:5.0f} us x{statistics.median(t['new']) / base:.2f}")
        print(f"  {name:8s} largest relative difference {max(diffs):.1e}; " + "  ".join(cells), flush=True)


if __name__ == "__main__":
    main()
