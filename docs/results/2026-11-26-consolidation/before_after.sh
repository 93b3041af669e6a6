#!/usr/bin/env bash
# The consolidation's speed check: the tree before it (BEFORE, a worktree of e636b4c) and after it (AFTER), side by
# side on one machine in one sitting, nothing else running, 2 threads. cycle_split twice each, interleaved; then
# `specdec bench` on the first 20 MT-bench questions, T=0 and T=1, vanilla and EAGLE-3, 64 new tokens.
# Usage: bash before_after.sh BEFORE_TREE AFTER_TREE OUT_DIR   (run from the AFTER tree, whose .venv is used)
set -euo pipefail
BEFORE=$1; AFTER=$2; OUT=$3
PY=$AFTER/.venv/bin/python
mkdir -p "$OUT"
export OMP_NUM_THREADS=2
# The adaptive budget's cost curves are cached per backend label (before: cpu-packed, after: packed): measure both
# afresh here, on the quiet machine, so neither side runs on a curve measured under load.
rm -f "${SPECDEC_CACHE:-$HOME/.cache/specdec}"/budget/*.json
for rep in 1 2; do
  for side in before after; do
    tree=$BEFORE; [ "$side" = after ] && tree=$AFTER
    PYTHONPATH=$tree $PY "$tree/benchmarks/cycle_split.py" --prompts 8 --new-tokens 64 --threads 2 \
      > "$OUT/cycle_split_${side}_$rep.txt" 2>/dev/null
  done
done
for side in before after; do
  tree=$BEFORE; [ "$side" = after ] && tree=$AFTER
  PYTHONPATH=$tree $PY -m specdec.cli bench --methods vanilla eagle3 --temperatures 0 1 --limit 20 \
    --max-new-tokens 64 --threads 2 --no-progress --fresh --out "$OUT/bench_$side" > "$OUT/bench_$side.txt" 2>/dev/null
done
# A second pair in the reverse order (after first), T=0 only: the order's share of the drift.
if [ "${REVERSE:-1}" = 1 ]; then
  for side in after before; do
    tree=$BEFORE; [ "$side" = after ] && tree=$AFTER
    PYTHONPATH=$tree $PY -m specdec.cli bench --methods vanilla eagle3 --temperatures 0 --limit 20 \
      --max-new-tokens 64 --threads 2 --no-progress --fresh --out "$OUT/bench2_$side" > "$OUT/bench2_$side.txt" 2>/dev/null
  done
fi
