#!/usr/bin/env bash
# The GPU check's device side (issue 46, item 5), run by the device tool in the repository root of the slim tree
# (scripts/gpu_pack.py plans the calls and writes .gpu/PLAN.md):
#
#   bash scripts/gpu_check.sh stash N   # keep the pieces this call carried (.gpu/calls/call-N) in $STASH
#   bash scripts/gpu_check.sh run N     # keep them, then: reassemble and check the GGUF, install the wheels, run the
#                                       # GPU tests and the bench; logs and results under $OUT
#
# The machine keeps $STASH only while it stays warm (30 s after a call): make the calls one right after the other.
# Dry run on a CPU (no wheels installed, a 1-prompt bench on the CPU): GPU_CHECK_DRY=1 OUT=/tmp/out bash ... run N
# Resume a bench the call's limit cut, while the machine is warm: GPU_CHECK_SKIP_TESTS=1 OUT=$OUT bash ... run N
set -euo pipefail
verb=${1:?stash or run}
call=${2:?the call number}
STASH=${STASH:-/tmp/specdec-gpu}
OUT=${OUT:?set OUT to the output folder}
mkdir -p "$STASH" "$OUT"
src=.gpu/calls/call-$call
if [ -d "$src" ]; then
    cp -r "$src"/. "$STASH"/
fi
echo "stash after call $call:"; ls -la "$STASH" "$STASH"/wheels 2>/dev/null || true
[ "$verb" = stash ] && exit 0

cd_root=$(pwd)
parts=("$STASH"/model.gguf.xz.part-*)
cat "${parts[@]}" | xz -d > "$STASH/model.gguf"
(cd "$STASH" && sha256sum -c model.sha256)
if [ -z "${GPU_CHECK_DRY:-}" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        "$STASH"/wheels/*.whl
    export PYTHONPATH=/tmp/site:$cd_root
    device=cuda; limit=2; tokens=128; temps="0 1"
    python=python3
else
    export PYTHONPATH=$cd_root
    device=cpu; limit=1; tokens=8; temps="0"
    python=${PYTHON:-.venv/bin/python}
fi
export PYTHONUNBUFFERED=1
{ nvidia-smi 2>/dev/null || true; $python -c "import torch, transformers; print(torch.__version__, transformers.__version__, torch.cuda.is_available())"; } \
    > "$OUT/machine.txt" 2>&1
# the GPU tests: CUDA graphs, the compiled cycle, the batched loop (skip where no GPU: the dry run)
stamp() { echo "[$(date -u +%H:%M:%S)] $*"; }
if [ -z "${GPU_CHECK_SKIP_TESTS:-}" ]; then  # set it to resume a cut bench without the tests' two minutes
    stamp "tests start"
    timeout 150 $python -m pytest -q -p no:cacheprovider -x --durations=15 tests/test_compiled.py tests/test_batched.py \
        -m "not heavy" > "$OUT/tests.log" 2>&1 || echo "tests failed or timed out: see tests.log"
    tail -3 "$OUT/tests.log"
fi
# the bench: 2 Spec-Bench questions per family, T = 0 and 1, resumable if the call runs out; it prints each method's
# build and warm-up seconds and graphs compiled ("ready ..."), where a first run's minutes go
stamp "bench start"
timeout 380 $python -m specdec.cli bench --model "$STASH/model.gguf" \
    --head specdec/heads/smollm2-135m-instruct/eagle3 --device "$device" --dataset spec-bench --limit "$limit" \
    --methods eagle3 composite hf-generate --temperatures $temps --max-new-tokens "$tokens" --out "$STASH/bench" \
    --no-progress > "$OUT/bench.log" 2>&1 || echo "bench stopped (timeout or error): rerun the last call to resume"
stamp "bench end"
for f in results.jsonl results.md runs.jsonl; do
    [ -f "$STASH/bench/$f" ] && cp "$STASH/bench/$f" "$OUT/$f"
done
tail -5 "$OUT/bench.log"
