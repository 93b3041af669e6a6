"""A decoding step's GEMMs one shape at a time: stock against oneDNN-prepacked, per dtype and row count, cold weights.

    python benchmarks/gemm_shapes.py [--dtypes float32 bfloat16] [--rows 1 2 8 16] [--repeats 15] [--threads 2]
                                     [--kernels] [--inductor] [--out results.json]

The shapes are SmolLM2-135M-Instruct's linears as the fast path runs them (``in -> out``): ``q/k/v`` stacked
(576 -> 960), ``o`` (576 -> 576), ``k`` or ``v`` alone (576 -> 192), ``gate/up`` stacked (576 -> 3072), ``gate`` or
``up`` alone (576 -> 1536), ``down`` (1536 -> 576) and the vocabulary projection (576 -> 49152). Sides:

- ``stock``: ``torch.nn.functional.linear`` on the plain weight (what an unpacked model runs: MKL's sgemm for
  float32, oneDNN reordering the weight on every call for bfloat16 on the builds seen so far);
- ``packed``: :class:`specdec.backends.kernels.PackedLinear` (the weight reordered once, ``mkldnn._linear_pointwise``).

In a decoding step every weight comes from memory, not from cache. So each shape runs over enough copies of its
weight to exceed 64 MB, one call per copy, and a call's time is a pass's time divided by the copies (median of the
``--repeats`` passes; the sides and row counts interleaved pass by pass). Printed per shape and dtype: ms per call,
weight GB/s, packed ÷ stock, and T(n)/T(1) per side. ``--kernels`` then runs one call of each (shape, dtype, side,
row count 1 and 8) under oneDNN's and MKL's verbose modes, so the log names each kernel (AMX or AVX-512, GEMV or
GEMM); their lines go to this process's stdout.

``--inductor`` adds a third side (issue 33 item 1: MKL, oneDNN and inductor's CPU GEMM templates per shape) for 1
and 8 rows: ``torch.compile(mode="max-autotune-no-cudagraphs")`` with frozen weights, so autotuning picks inductor's
C++ GEMM template (AMX where the CPU has it) or oneDNN's packed linear per GEMM. It compiles one graph that applies
every copy to the input (a single compiled linear would pay the graph's call overhead per copy), timed against the
same copies run by ``stock`` and ``packed`` modules in turn; inductor's autotuning log names its choice (where its
cache does not already hold one). ``--skinny`` adds ``specdec::skinny_linear`` (:mod:`specdec.backends.skinny`, built
on first use) as a side for float32, over the same copies. Printed: ms
per call, inductor ÷ packed, and the largest difference from ``stock`` (a kernel that groups its sums otherwise
gives other bits).

This explains the whole-model curves of ``benchmarks/fastpath.py`` shape by shape (where a weight is read below the
memory bandwidth, and which row counts stay flat); the choices themselves are made from ``fastpath.py``'s
end-to-end sides. CPU, threads and torch build are printed first: only ratios within one run count.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from torch import nn

from specdec.backends import measured
from specdec.backends.cpu import cpu_flags, cpu_name
from specdec.backends.skinny import SkinnyLinear

#: ``(name, in_features, out_features)`` of SmolLM2-135M's linears as the fast path runs them.
SHAPES = (
    ("qkv stacked", 576, 960),
    ("o", 576, 576),
    ("k or v", 576, 192),
    ("gate/up stacked", 576, 3072),
    ("gate or up", 576, 1536),
    ("down", 1536, 576),
    ("vocab", 576, 49152),
)
#: Weight bytes each shape's copies add up to (well above any of these VMs' caches).
COLD_BYTES = 64 << 20
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def sides(n_in: int, n_out: int, dtype: torch.dtype, g: torch.Generator) -> dict[str, list[nn.Module]]:
    """``{side: [copies of the linear]}``: plain ``nn.Linear`` modules and their packed twins (same values)."""
    return measured.sides((n_in, n_out, False), dtype, g, cold_bytes=COLD_BYTES)


def time_shape(mods: dict[str, list[nn.Module]], rows: list[int], repeats: int) -> dict:
    """Median ms per call for every (side, row count), interleaved pass by pass after one warm-up pass."""
    passes = measured.time_shape(mods, tuple(rows), repeats)
    return {s: {n: statistics.median(v) * 1e3 for n, v in r.items()} for s, r in passes.items()}


@torch.no_grad()
def show_kernels(mods: dict[str, list[nn.Module]], dtype: torch.dtype) -> None:
    """One call per side and row count (1, 8) under oneDNN's and MKL's verbose modes (their lines go to stdout)."""
    n_in = mods["stock"][0].in_features
    for side, layers in mods.items():
        for n in (1, 8):
            print(f"     -- {side}, {n} row(s):", flush=True)
            x = torch.randn(n, n_in).to(dtype)
            onednn, mkl = torch.backends.mkldnn, torch.backends.mkl
            with onednn.verbose(onednn.VERBOSE_ON), mkl.verbose(mkl.VERBOSE_ON):
                layers[0](x)


class _EveryCopy(nn.Module):
    """All copies of a shape's linear applied to one input: one compiled graph runs them all, so a call's dispatch
    (guards, the graph's Python wrapper) is shared by the copies as a whole model's would be."""

    def __init__(self, linears: list[nn.Module]) -> None:
        super().__init__()
        self.linears = nn.ModuleList(linears)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [linear(x) for linear in self.linears]


@torch.no_grad()
def inductor_side(mods: dict[str, list[nn.Module]], rows: tuple[int, ...], repeats: int) -> dict:
    """``{side: {rows: ms per call}}`` for stock, packed and inductor over the same cold copies (the first table's
    method; inductor runs every copy in one compiled graph), and per row count the compile time and
    ``max |inductor - stock|`` of the first copy."""
    import torch._inductor.config as inductor_config

    plain = mods["stock"]
    k = len(plain)
    every = {side: _EveryCopy(layers) for side, layers in mods.items()}
    out: dict = {"stock": {}, "packed": {}, "inductor": {}, "max_diff": {}, "compile_s": {}}
    for n in rows:
        x = torch.randn(n, plain[0].in_features).to(plain[0].weight.dtype)
        t0 = time.perf_counter()
        with inductor_config.patch(freezing=True, max_autotune_gemm_backends="CPP,ATEN"):
            compiled = torch.compile(every["stock"], mode="max-autotune-no-cudagraphs", dynamic=False)
            y = compiled(x)[0]
        out["compile_s"][n] = time.perf_counter() - t0
        out["max_diff"][n] = float((y.float() - plain[0](x).float()).abs().max())
        fns = {**every, "inductor": compiled}
        times: dict[str, list[float]] = {side: [] for side in fns}
        for rep in range(repeats + 1):
            for side, fn in fns.items():
                t0 = time.perf_counter()
                fn(x)
                if rep:
                    times[side].append((time.perf_counter() - t0) / k)
        for side, v in times.items():
            out[side][n] = statistics.median(v) * 1e3
        torch._dynamo.reset()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=list(DTYPES))
    parser.add_argument("--rows", nargs="+", type=int, default=[1, 2, 8, 16])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--shapes", nargs="+", default=None, help="names from SHAPES (default: all)")
    parser.add_argument("--kernels", action="store_true", help="name each kernel (oneDNN and MKL verbose)")
    parser.add_argument("--inductor", action="store_true", help="also stock vs packed vs inductor, caches flushed")
    parser.add_argument("--skinny", action="store_true", help="float32: also specdec::skinny_linear (a side)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    flags = sorted(cpu_flags() & {"avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "avx512_fp16"})
    print(f"cpu={cpu_name()} flags={','.join(flags)} threads={args.threads} torch={torch.__version__}")
    shapes = [s for s in SHAPES if args.shapes is None or s[0] in args.shapes]
    report: dict = {"cpu": cpu_name(), "flags": flags, "threads": args.threads, "torch": torch.__version__}
    g = torch.Generator().manual_seed(0)
    rows = sorted(set(args.rows) | {1})
    for dtype_name in args.dtypes:
        dtype = DTYPES[dtype_name]
        print(f"{dtype_name}: ms per call (weight GB/s) for {rows} rows; packed / stock; T(n)/T(1)")
        for name, n_in, n_out in shapes:
            mods = sides(n_in, n_out, dtype, g)
            if args.skinny and dtype == torch.float32:
                mods["skinny"] = [SkinnyLinear(lin) for lin in mods["stock"]]  # the same weights
            ms = time_shape(mods, rows, args.repeats)
            gbytes = n_in * n_out * dtype.itemsize / 1e9
            print(f"   {name} ({n_in} -> {n_out}, {len(mods['stock'])} copies)")
            for side, r in ms.items():
                cells = " ".join(f"{n}:{t:.3f} ({gbytes / (t / 1e3):.0f})" for n, t in r.items())
                curve = " ".join(f"{r[n] / r[1]:.2f}" for n in rows)
                print(f"     {side:7s} {cells}   T(n)/T(1) {curve}")
            ratio = " ".join(f"{n}:{ms['packed'][n] / ms['stock'][n]:.2f}" for n in rows)
            print(f"     packed / stock {ratio}")
            if "skinny" in ms:
                print("     skinny / stock " + " ".join(f"{n}:{ms['skinny'][n] / ms['stock'][n]:.2f}" for n in rows))
            report[f"{dtype_name}/{name}"] = {"in": n_in, "out": n_out, "ms": ms}
            if args.kernels:
                show_kernels(mods, dtype)
            if args.inductor:
                r = inductor_side(mods, (1, 8), args.repeats)
                print("     with inductor (max-autotune, frozen weights): ms per call for 1 / 8 rows")
                for side in ("stock", "packed", "inductor"):
                    print(f"       {side:8s} {r[side][1]:.3f} / {r[side][8]:.3f}")
                vs = " / ".join(f"{r['inductor'][n] / r['packed'][n]:.2f}" for n in (1, 8))
                diff = " / ".join(f"{r['max_diff'][n]:.2g}" for n in (1, 8))
                took = " / ".join(f"{r['compile_s'][n]:.0f}" for n in (1, 8))
                print(f"       inductor / packed {vs}; max |inductor - stock| {diff}; compile {took} s")
                report[f"{dtype_name}/{name}"]["flushed"] = r
            del mods
    if args.out:
        args.out.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
