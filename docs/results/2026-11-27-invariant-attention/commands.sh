#!/usr/bin/env bash
# The row-invariant attention as one float64 SDPA on a float64 cache (issue 33, bfloat16 path): how every file in this
# folder was made (run from the repository root, nothing else of ours running).
set -euo pipefail
D=docs/results/2026-11-27-invariant-attention
# Files under first-form/ and ab_attention.txt, bench-bf16/, rss_cache.txt and demo.txt were made on 8c7ff5d/df02ace
# (the float64 attention, every single row padded); fastpath_bf16.*, dtypes.* and ab_padding.txt on the final code.
# Before (829e2ab's invariant attention, loaded from git, on a bfloat16 cache) against after, in one process, with
# the bitwise tree-row = 1-token-step check for both:
rm -f ~/.cache/specdec/budget/*.json
PYTHONPATH=. .venv/bin/python $D/ab_attention.py --check > $D/ab_attention.txt
# Single-row padding where the probe says (final code) against every linear padded, in one process:
.venv/bin/python $D/ab_padding.py > $D/ab_padding.txt
# The fast-path benchmark in bfloat16 (once on 8c7ff5d into first-form/, once on the final code):
rm -f ~/.cache/specdec/budget/*.json
.venv/bin/python benchmarks/fastpath.py --dtype bfloat16 --out $D/fastpath_bf16.json > $D/fastpath_bf16.txt
# End to end, every method on every target back to back per prompt (the bfloat16 entry's command):
rm -f ~/.cache/specdec/budget/*.json
.venv/bin/python benchmarks/dtypes.py --prompts 8 --new-tokens 128 --out $D/dtypes.json > $D/dtypes.txt
# MT-bench, 20 questions x 128 tokens, bfloat16 (the bfloat16 entry's command):
rm -f ~/.cache/specdec/budget/*.json
.venv/bin/specdec bench --dataset mtbench --limit 20 --max-new-tokens 128 --methods eagle3 hf-generate --dtype bfloat16 --out $D/bench-bf16 --fresh --no-progress
# Resident memory with a 2,048-position cache (a fresh process per line):
for side in before after variable; do for context in 120 1500; do
  .venv/bin/python $D/rss_cache.py $side $context
done; done > $D/rss_cache.txt
make demo > $D/demo.txt 2>&1
