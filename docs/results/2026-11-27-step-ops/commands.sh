#!/usr/bin/env bash
# Fewer ops per target step (issue 33, the CPU-neutral part): how every file in this folder was made
# (run from the repository root, nothing else of ours running).
set -euo pipefail
D=docs/results/2026-11-27-step-ops
# At commit e92cabb (norms, one-op linears, narrow cache), the script's first version, two sides:
#   .venv/bin/python $D/ab_step_ops.py --reps 40 --dtype float32 > $D/ab2_fp32.txt
#   .venv/bin/python $D/ab_step_ops.py --reps 40 --dtype bfloat16 > $D/ab2_bf16.txt
# With stacked projections: before (4b093af's code), unstacked (e92cabb's), after, in one process; first at dfaed64
# (ab3_*.txt), then on the final code after the review mends (ab_*.txt):
.venv/bin/python $D/ab_step_ops.py --reps 40 --dtype float32 > $D/ab_fp32.txt
.venv/bin/python $D/ab_step_ops.py --reps 40 --dtype bfloat16 > $D/ab_bf16.txt
# The fast-path benchmark on the final code (before the copy's memory fix), both dtypes:
rm -f ~/.cache/specdec/budget/*.json
.venv/bin/python benchmarks/fastpath.py --dtype float32 --prompts 4 --new-tokens 64 --repeats 5 --out $D/fastpath_fp32.json > $D/fastpath_fp32.txt
.venv/bin/python benchmarks/fastpath.py --dtype bfloat16 --prompts 4 --new-tokens 64 --repeats 5 --out $D/fastpath_bf16.json > $D/fastpath_bf16.txt
# Resident memory after the fix (fresh process per probe):
for dt in float32 bfloat16; do for b in auto auto-copy; do
  .venv/bin/python -c "import sys; sys.path.insert(0, 'benchmarks'); from fastpath import rss_probe; rss_probe('$b', 120, '$dt')" | grep backend | sed "s/^/$dt /"
done; done > $D/rss_after_fix.txt
# End to end, float32, final code of the step changes (dfaed64 + the memory fix):
rm -f ~/.cache/specdec/budget/*.json
.venv/bin/specdec bench --dataset mtbench --limit 20 --max-new-tokens 128 --methods eagle3 hf-generate --dtype float32 --out $D/bench-fp32 --fresh --no-progress
make demo > $D/demo.txt 2>&1
