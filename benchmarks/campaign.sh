#!/usr/bin/env bash
# Issue 33's measurements on the CPU this runs on, in the order that decides the most first, resumable across
# sessions: a step whose `<step>.done` marker exists in the output folder is skipped, and the MT-bench steps resume
# prompt by prompt (`specdec bench` keeps its results.jsonl). Commit the folder between sessions to keep it.
#
#     bash benchmarks/campaign.sh [--list] [--commit] [--short] [OUT] [STEP ...]
#
# --list shows what is done and what is left; --commit commits the output folder after every step (a session that
# is cut off keeps what it finished); --short runs the short form (about 40 minutes on AMD Zen 3), what every
# session on a CPU without a current row in the results page runs first: machine doctor fastpath-fp32
# invariant-tests specbench-short.
#
# OUT defaults to docs/results/<today>-<vendor>-f<family>m<model>; STEPs default to all of them, in this order:
#
#   machine            the CPU (lscpu, the flags that pick kernels), torch's build, the git commit
#   doctor             specdec doctor --refresh: the kernel table weights='auto' decides by on this CPU, both dtypes
#   specbench-short    Spec-Bench, 5 questions per family x 96 tokens, T = 0: HF generate, EAGLE-3, composite (and
#                      own vanilla): the results page's per-CPU row
#   fastpath-fp32      benchmarks/fastpath.py --dtype float32: T(n)/T(1), 1-token step vs HF, vanilla vs generate,
#                      draft share, resident memory; a `packed` side wherever auto leaves some linears stock
#   fastpath-bf16      the same in bfloat16 (+ fast-var: what the row-invariant numerics cost; RSS vs float32)
#   invariant-tests    tests/test_invariant.py: tree rows = 1-token steps bit for bit on this CPU's kernels
#   gemm-shapes        benchmarks/gemm_shapes.py --kernels: each linear shape stock vs packed, per dtype and row
#                      count, cold weights, and the kernel oneDNN/MKL picks (AMX or AVX-512, GEMV or GEMM)
#   gemm-inductor      benchmarks/gemm_shapes.py --rows 1 8 --inductor: the same shapes with inductor's max-autotune
#                      GEMMs (C++ template, AMX where present) beside stock and packed, and what autotuning picks
#   demo               make demo's composite, on this machine
#   mtbench-fp32       MT-bench, 80 questions x 128 tokens, EAGLE-3 + HF generate, T = 0 and T = 1
#   mtbench-bf16       the same on the bfloat16 target (HF generate on the bfloat16 model)
#   sampled-trees      benchmarks/sampled_trees.py --weights auto --prompts 20 (r3d against the menu at T = 1)
#   mtbench-bf16-packed  20 questions, T = 0, bfloat16 with every linear packed (and so the invariant numerics):
#                      the candidate default where auto keeps bfloat16 linears stock (Intel, until measured)
#
# Timing: run nothing else meanwhile (2 cores); only ratios within one step's run count. On a 2-core AMD EPYC Zen 4
# the whole campaign takes about 2.5 hours, most of it the two MT-bench steps (~25 min per dtype and temperature).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
SPECDEC=.venv/bin/specdec

LIST=0
COMMIT=0
SHORT=0
while [[ ${1:-} == --* ]]; do
  case $1 in
    --list) LIST=1 ;;
    --commit) COMMIT=1 ;;
    --short) SHORT=1 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
TAG=$($PY - <<'EOF'
from specdec.backends.cpu import cpu_info
info = cpu_info()
vendor = {"GenuineIntel": "intel", "AuthenticAMD": "amd"}.get(info.get("vendor_id", ""), "cpu")
print(f"{vendor}-f{info.get('cpu family', 'x')}m{info.get('model', 'x')}")
EOF
)
OUT=${1:-docs/results/$(date +%F)-$TAG}
[[ $# -gt 0 ]] && shift
ALL=(machine doctor fastpath-fp32 fastpath-bf16 invariant-tests specbench-short gemm-shapes gemm-inductor demo mtbench-fp32
  mtbench-bf16 sampled-trees mtbench-bf16-packed)
SHORT_STEPS=(machine doctor fastpath-fp32 invariant-tests specbench-short)
STEPS=("$@")
[[ ${#STEPS[@]} -eq 0 && $SHORT == 1 ]] && STEPS=("${SHORT_STEPS[@]}")
[[ ${#STEPS[@]} -eq 0 ]] && STEPS=("${ALL[@]}")

command_of() {  # the command line of one step (run from the repository root)
  # the eager path, also where this machine has built a package (its columns are measured apart: docs/results.md)
  local bench="$SPECDEC bench --dataset mtbench --max-new-tokens 128 --no-progress --static-shapes off"
  case $1 in
    machine) echo "lscpu; grep -o -w -E 'avx512f|avx512_bf16|amx_bf16|amx_tile|avx512_fp16' /proc/cpuinfo | sort | uniq -c; $PY -c 'import torch, transformers; from specdec.backends.cpu import cpu_name; print(cpu_name()); print(\"torch\", torch.__version__, \"transformers\", transformers.__version__); print(torch.__config__.show())'; git log -1 --format='commit %H %s'" ;;
    doctor) echo "$SPECDEC doctor --refresh" ;;
    specbench-short) echo "$SPECDEC bench --dataset spec-bench --limit 5 --max-new-tokens 96 --no-progress --methods hf-generate eagle3 composite --temperatures 0 --threads 2 --static-shapes off --out $OUT/specbench-short" ;;
    fastpath-fp32) echo "$PY benchmarks/fastpath.py --dtype float32 --out $OUT/fastpath_fp32.json" ;;
    fastpath-bf16) echo "$PY benchmarks/fastpath.py --dtype bfloat16 --out $OUT/fastpath_bf16.json" ;;
    invariant-tests) echo "$PY -m pytest -q -p no:cacheprovider tests/test_invariant.py" ;;
    gemm-shapes) echo "$PY benchmarks/gemm_shapes.py --kernels --out $OUT/gemm_shapes.json" ;;
    gemm-inductor) echo "$PY benchmarks/gemm_shapes.py --rows 1 8 --inductor --out $OUT/gemm_shapes_inductor.json" ;;
    demo) echo "$PY -m specdec.demo" ;;
    mtbench-fp32) echo "$bench --methods eagle3 hf-generate --temperatures 0 1 --out $OUT/mtbench-fp32" ;;
    mtbench-bf16) echo "$bench --methods eagle3 hf-generate --temperatures 0 1 --dtype bfloat16 --out $OUT/mtbench-bf16" ;;
    sampled-trees) echo "$PY benchmarks/sampled_trees.py --weights auto --prompts 20 --out $OUT/sampled_trees.json" ;;
    mtbench-bf16-packed) echo "$bench --methods eagle3 hf-generate --limit 20 --dtype bfloat16 --weights packed --out $OUT/mtbench-bf16-packed" ;;
    *) echo "unknown step $1; steps: ${ALL[*]}" >&2; return 2 ;;
  esac
}

mkdir -p "$OUT"
for step in "${STEPS[@]}"; do
  cmd=$(command_of "$step")
  if [[ -e $OUT/$step.done ]]; then
    echo "done     $step ($(cat "$OUT/$step.done"))"
    continue
  fi
  if [[ $LIST == 1 ]]; then
    echo "to do    $step: $cmd"
    continue
  fi
  # a cost curve measured by other code or under other load is measured again (the cache is per CPU, not per run)
  [[ $step == machine || $step == invariant-tests ]] || rm -f ~/.cache/specdec/budget/*.json
  echo "running  $step: $cmd"
  start=$(date +%s)
  echo "\$ $cmd" > "$OUT/$step.txt"
  if bash -c "$cmd" >> "$OUT/$step.txt" 2>&1; then
    echo "$(date -u +%FT%TZ), $(($(date +%s) - start)) s, commit $(git rev-parse --short HEAD)" > "$OUT/$step.done"
    echo "         $(cat "$OUT/$step.done")"
  else
    echo "FAILED   $step (see $OUT/$step.txt); later steps still run" >&2
  fi
  if [[ $COMMIT == 1 ]]; then
    git add "$OUT" && git commit -q -m "Campaign step $step on $TAG ($OUT)" -- "$OUT" || true
  fi
done
