#!/bin/sh
# 2026-11-26: the adaptive tree chooses its depth level by level. AMD EPYC family 26 (Zen 5), 2 threads,
# torch 2.13.0+cpu, transformers 5.24.0. Training was paused (SIGSTOP) while each of these ran.

# Level by level vs the previous-cycle depth rule (by_level=False), interleaved per prompt, T=0 (at acbf52c):
python docs/results/2026-11-26-level-stop/levels_ab.py 20 128                                  # levels_ab_eagle3_20q.txt
python docs/results/2026-11-26-level-stop/levels_ab.py 10 128 eagle3,eagle2,hass,small-lm,ngram  # levels_ab_all_10q.txt

# MT-bench, all 80 questions, T=0, 128 new tokens (at bb999e2):
specdec bench --methods vanilla hf-generate eagle3 --dataset mtbench --temperatures 0 --max-new-tokens 128 \
  --threads 2 --out docs/results/2026-11-26-level-stop/mtbench-t0

# make demo, old (26e9dfd, a worktree) and new (bb999e2) alternating twice -> demo_abab.txt
for i in 1 2; do (cd /tmp/old && python -m specdec.demo); python -m specdec.demo; done

# MT-bench, all 80 questions, T=0 and T=1 in one run (at 60b8c06, docs changes only since bb999e2):
specdec bench --methods vanilla hf-generate eagle3 --dataset mtbench --temperatures 0 1 --max-new-tokens 128 \
  --threads 2 --no-progress --out docs/results/2026-11-26-level-stop/mtbench-t0-t1

# After the review mends (one transfer per level, the last step recorded too), EAGLE-3 again:
python docs/results/2026-11-26-level-stop/levels_ab.py 10 128   # levels_ab_eagle3_10q_review_fix.txt
