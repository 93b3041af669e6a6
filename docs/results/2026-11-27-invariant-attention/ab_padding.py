"""Single-row padding where the probe says a kernel needs it, against padding every packed linear, in one process.

    .venv/bin/python docs/results/2026-11-27-invariant-attention/ab_padding.py [--contexts 120 500] [--rounds 100]

Sides, three copies of the packed bfloat16 SmolLM2-135M-Instruct sharing their tensors, 1-token steps interleaved:

* ``all-padded``: invariant numerics with every packed linear padding single rows (commit df02ace's behaviour);
* ``probed``: invariant numerics as committed: only the linears whose kernel needs it pad
  (``kernels.single_row_padding``);
* ``variable``: ``invariant=False``.

Prints what the probe found per shape, the medians, and the medians of the per-round paired ratios.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from specdec.backends import cpu, kernels, row_probe
from specdec.models import load_smollm2
from specdec.target import HFTarget


def paired(times: dict[str, list[float]], a: str, b: str) -> float:
    """The median of the per-round ratios of side ``a`` to side ``b``."""
    return statistics.median(x / y for x, y in zip(times[a], times[b], strict=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int, nargs="+", default=[120, 500])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, _ = load_smollm2(dtype=torch.bfloat16)
    print(f"cpu={cpu.cpu_name()} threads={args.threads} torch={torch.__version__} dtype=bfloat16")
    for context in args.contexts:
        sides = {
            "all-padded": HFTarget(model, max_len=context + 8),
            "probed": HFTarget(model, max_len=context + 8),
            "variable": HFTarget(model, max_len=context + 8, invariant=False),
        }
        for module in sides["all-padded"].model.modules():
            if kernels.runs_packed(module):
                module.pad_single_row = True
        if context == args.contexts[0]:
            print("probe (in, out, dtype, bias, threads) -> pads single rows:", row_probe._PROBED)
            print("probed:", sides["probed"].execution.describe())
        prompt = torch.randint(0, 49152, (context,), generator=torch.Generator().manual_seed(1))
        times = {k: [] for k in sides}
        with torch.no_grad():
            for target in sides.values():
                target.prefill(prompt)
            for round_ in range(args.rounds + 1):  # round 0 warms up
                for name, target in sides.items():
                    t0 = time.perf_counter()
                    target.decode_one(torch.tensor(5))
                    dt = time.perf_counter() - t0
                    target.length = context
                    if round_:
                        times[name].append(dt)
        ms = "  ".join(f"{k} {statistics.median(v) * 1e3:.1f} ms" for k, v in times.items())

        print(
            f"context {context}: 1-token step {ms}; probed/all-padded {paired(times, 'probed', 'all-padded'):.3f}, "
            f"probed/variable {paired(times, 'probed', 'variable'):.3f}, all-padded/variable "
            f"{paired(times, 'all-padded', 'variable'):.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
