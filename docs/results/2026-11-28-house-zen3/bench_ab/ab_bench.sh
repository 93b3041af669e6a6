i=0
for side in old new old new; do
  i=$((i+1))
  if [ $side = old ]; then P=/tmp/exp/base; else P=/work/main; fi
  echo "== $side $i $(date +%T)"
  cd $P
  PYTHONPATH=$P /work/main/.venv/bin/python -c "import specdec, sys; print(specdec.__file__)"
  PYTHONPATH=$P /work/main/.venv/bin/python -m specdec.cli bench --dataset mtbench --limit 6 --max-new-tokens 48 --methods eagle3 composite --temperatures 0 --threads 2 --out /tmp/exp/bench_${side}_$i --fresh > /tmp/exp/bench_${side}_$i.log 2>&1
  echo "rc $?"
  grep "^| " /tmp/exp/bench_${side}_$i/results.md | head -8
done
