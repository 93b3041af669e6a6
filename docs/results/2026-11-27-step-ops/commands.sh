#!/usr/bin/env bash
# Fewer ops per target step (issue 33, the CPU-neutral part): how every file in this folder was made
# (run from the repository root, nothing else of ours running).
set -euo pipefail
D=docs/results/2026-11-27-step-ops
# At commit e92cabb (norms, one-op linears, narrow cache), the script's first version, two sides:
#   .venv/bin/python $D/ab_step_ops.py --reps 40 --dtype float32 > $D/ab2_fp32.txt
#   .venv/bin/python $D/ab_step_ops.py --reps 40 --dtype bfloat16 > $D/ab2_bf16.txt
# With stacked projections: before (4b093af's code), unstacked (e92cabb's), after, in one process.
.venv/bin/python $D/ab_step_ops.py --reps 40 --dtype float32 > $D/ab_fp32.txt
.venv/bin/python $D/ab_step_ops.py --reps 40 --dtype bfloat16 > $D/ab_bf16.txt
