#!/usr/bin/env bash
# bfloat16 targets and row-invariant numerics (issue 33, AMD Zen 4 part): how every file in this folder was made
# (run from the repository root, nothing else of ours running; the VM itself was noisy, see README.md).
set -euo pipefail
D=docs/results/2026-11-27-bfloat16
rm -f ~/.cache/specdec/budget/*.json   # the adaptive trees' cost curves, re-measured by each run
# Curves, 1-token step, vanilla vs HF generate, EAGLE-3 split, memory: bfloat16 (final code) and float32.
.venv/bin/python benchmarks/fastpath.py --dtype bfloat16 --prompts 4 --new-tokens 64 --repeats 5 --out $D/fastpath_bf16.json > $D/fastpath_bf16.txt
.venv/bin/python benchmarks/fastpath.py --dtype float32 --prompts 4 --new-tokens 64 --repeats 5 --out $D/fastpath_fp32.json > $D/fastpath_fp32.txt
# float32 against bfloat16 (invariant and not) end to end, interleaved per prompt in one process.
.venv/bin/python benchmarks/dtypes.py --prompts 8 --new-tokens 128 --out $D/dtypes.json > $D/dtypes.txt
# MT-bench, 20 questions x 128 tokens, T = 0: bfloat16 (invariant, final code), float32, bfloat16 without invariance.
.venv/bin/specdec bench --dataset mtbench --limit 20 --max-new-tokens 128 --methods eagle3 hf-generate --dtype bfloat16 --out $D/bench-bf16 --fresh --no-progress
.venv/bin/specdec bench --dataset mtbench --limit 20 --max-new-tokens 128 --methods eagle3 hf-generate --dtype float32 --out $D/bench-fp32 --fresh --no-progress
.venv/bin/specdec bench --dataset mtbench --limit 20 --max-new-tokens 128 --methods eagle3 --dtype bfloat16 --invariant off --out $D/bench-bf16-variable --fresh --no-progress
# After the review mends (commit 3076733), the same bfloat16 run again:
.venv/bin/python benchmarks/fastpath.py --dtype bfloat16 --prompts 4 --new-tokens 64 --repeats 5 --out $D/fastpath_bf16_final.json > $D/fastpath_bf16_final.txt
