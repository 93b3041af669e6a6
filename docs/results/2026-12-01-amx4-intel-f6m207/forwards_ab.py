"""The package's forwards with the AMX form's codes one a byte against two a byte (4-bit), one process (issue 45).

    python docs/results/2026-12-01-amx4-intel-f6m207/forwards_ab.py   # forwards_ab.txt

Two SmolLM2 targets from their ahead-of-time packages (``weights="auto"``: the measured kernels), one prepared under
``SPECDEC_AMX4=off`` (Q4_1 linears on the AMX form take one byte a code and float32 scales: the previous package),
one under ``on`` (the default: two codes a byte, float16 scales); after a 250-token prompt each runs forwards of 1,
2, 4, 8 and 16 rows, the sides interleaved, 9 passes, the median kept; then the logits of a 4-row forward on both
sides, which must be bitwise equal where both put the same linears on the AMX form (the 4-bit form's outputs are
the byte form's bits).
"""

import copy
import os
import statistics
import time

import torch

from specdec.backends.skinny import coded_names
from specdec.models import load_smollm2
from specdec.target import HFTarget

ROWS, CONTEXT, PASSES = (1, 2, 4, 8, 16), 250, 9


def prepared(model: torch.nn.Module, switch: str) -> HFTarget:
    os.environ["SPECDEC_AMX4"] = switch
    target = HFTarget(copy.deepcopy(model), static_shapes="aot", max_len=512)
    target.warm_up()
    return target


def main() -> None:
    torch.set_num_threads(2)
    model, _ = load_smollm2()
    sides = {switch: prepared(model, switch) for switch in ("off", "on")}
    for switch, target in sides.items():
        names = coded_names(target.model)
        forms = {f: sum(n.endswith(f) for n in names) for f in ("@amx1", "@amx4n1")}
        print(f"SPECDEC_AMX4={switch}: {target.execution.describe()}; AMX layouts {forms}")
    ids = torch.arange(CONTEXT + max(ROWS)) % 1000 + 100
    for target in sides.values():
        target.runner.forward(ids[:CONTEXT], torch.arange(CONTEXT), 0)
    ms = {switch: {n: [] for n in ROWS} for switch in sides}
    for _ in range(PASSES + 1):
        for n in ROWS:
            for switch, target in sides.items():
                start = time.perf_counter()
                target.runner.forward(ids[CONTEXT : CONTEXT + n], torch.arange(CONTEXT, CONTEXT + n), CONTEXT)
                ms[switch][n].append((time.perf_counter() - start) * 1e3)
    for switch in sides:
        print(f"{switch:4s} ms  " + "  ".join(f"{n}: {statistics.median(v[1:]):5.1f}" for n, v in ms[switch].items()))
    ratio = {n: statistics.median(ms["on"][n][1:]) / statistics.median(ms["off"][n][1:]) for n in ROWS}
    print("on / off  " + "  ".join(f"{n}: {r:.3f}" for n, r in ratio.items()))
    print(
        "T(n)/T(1) on: "
        + "  ".join(f"{n}: {statistics.median(ms['on'][n][1:]) / statistics.median(ms['on'][1][1:]):.2f}" for n in ROWS)
    )
    out = {}
    for switch, target in sides.items():
        logits = target.runner.forward(ids[CONTEXT : CONTEXT + 4], torch.arange(CONTEXT, CONTEXT + 4), CONTEXT)[0]
        out[switch] = logits.float()
    print(
        f"4-row logits bitwise equal: {torch.equal(out['on'], out['off'])}, max |on - off| "
        f"{(out['on'] - out['off']).abs().max().item():.2e}"
    )


if __name__ == "__main__":
    main()
