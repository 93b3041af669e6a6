"""The package's kernels decided by timing the whole packages (:mod:`specdec.backends.package_verdict`), on
SmolLM2 with the kernels measured (``SPECDEC_KERNELS=measure``, where this CPU's rule would otherwise keep stock).

    SPECDEC_KERNELS=measure .venv/bin/python docs/results/2026-11-30-package-amd-f25m17/whole_packages.py

Builds the two packages where missing (the by-shape choice's and the stock one), times both, records the verdict and
prints it with what the target then runs; the verdict is recorded once per machine and model (``--refresh`` drops it
first so that it is measured again).
"""

import argparse
import json

import torch

from specdec.backends.package_verdict import verdict_path
from specdec.models import load_smollm2
from specdec.target import HFTarget

parser = argparse.ArgumentParser()
parser.add_argument("--refresh", action="store_true")
args = parser.parse_args()
torch.set_num_threads(2)
if args.refresh:
    verdict_path().unlink(missing_ok=True)
model, _ = load_smollm2()
target = HFTarget(model, max_len=512, static_shapes="aot")
for name, verdict in json.loads(verdict_path().read_text()).items():
    print(f"{name}: {json.dumps(verdict)}")
print(f"target: {target.execution.label}: {target.execution.describe()}")
