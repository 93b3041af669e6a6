#!/usr/bin/env bash
# Spec-Bench, issue 34: how every file in this folder was made (run from the repository root, nothing else running).
set -euo pipefail
rm -f ~/.cache/specdec/budget/*.json   # the adaptive trees' cost curve, re-measured alone by the first run

# Pilot: 2 questions per family, T = 0, with prompt lookup (ngram) beside retrieval (4 min).
.venv/bin/python -m specdec.cli bench --methods eagle3 retrieval composite ngram --dataset spec-bench --limit 2 \
    --temperatures 0 --max-new-tokens 96 --out runs/pilot --threads 2
# The table: 20 questions per family (120), T = 0 and T = 1, 96 new tokens (1,200 generations, about 95 min).
.venv/bin/python -m specdec.cli bench --methods hf-generate eagle3 retrieval composite --dataset spec-bench \
    --limit 20 --temperatures 0 1 --max-new-tokens 96 --out runs/specbench --threads 2
# The retrieval drafter's cost per cycle against a 24-node target forward, by context length.
.venv/bin/python benchmarks/retrieval_cost.py --contexts 250 500 1000 2000 --cycles 200 --threads 2
# After the mixed plan's speed-up (commit 26ee73a): T = 1 again, 10 questions per family, EAGLE-3 and the composite.
.venv/bin/python -m specdec.cli bench --methods eagle3 composite --dataset spec-bench --limit 10 --temperatures 1 \
    --max-new-tokens 96 --out runs/specbench-t1 --threads 2
