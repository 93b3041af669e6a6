#!/usr/bin/env bash
# Sampled trees sized by measured costs (issue 33's T = 1 loss): how every file in this folder was made
# (run from the repository root, nothing else of ours running). The budget's cost curves were re-measured first.
set -euo pipefail
D=docs/results/2026-11-27-sampled-menu
rm -f ~/.cache/specdec/budget/*.json
# Version 1 (per-shape mean accepted lengths, five shapes), then version 2 (per-node estimates, five shapes), then
# the final version (per-node estimates, DEFAULT_MENU of three shapes); the same command each time:
.venv/bin/python benchmarks/sampled_trees.py --weights stock --prompts 8 --new-tokens 128 --out $D/stock.json > $D/stock.txt
.venv/bin/python benchmarks/sampled_trees.py --weights auto --prompts 8 --new-tokens 128 --out $D/auto.json > $D/auto.txt
# (version 1's two logs are in v1-per-shape/, version 2's auto run in five-shapes/)
