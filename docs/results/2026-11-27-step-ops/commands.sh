#!/usr/bin/env bash
# Fewer ops per target step (issue 33, the CPU-neutral part): how every file in this folder was made
# (run from the repository root, nothing else of ours running).
set -euo pipefail
D=docs/results/2026-11-27-step-ops
# Before (4b093af's PackedLinear.forward, PositionLayer.update, transformers' norms) and after, in one process.
.venv/bin/python $D/ab_step_ops.py --reps 40 --dtype float32 > $D/ab_fp32.txt
.venv/bin/python $D/ab_step_ops.py --reps 40 --dtype bfloat16 > $D/ab_bf16.txt
