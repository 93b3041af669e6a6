#!/bin/sh
# 2026-11-26: sampled trees at T > 0. AMD EPYC family 26 (Zen 5), 2 threads, torch 2.13.0+cpu, transformers 5.24.0.
# Training was paused (SIGSTOP) while each of these ran.

# Per-cycle cost of sampled trees, before (902f049^) and after (902f049), 10 MT-bench questions x 64 tokens, T=1:
# before_t1_10q.log and after_t1_10q.log (its first row, "adaptive", ran beside a training job in the before run and
# is not comparable; at 902f049^ MethodOptions has no sampled_tree: MethodOptions() is the dynamic tree there).
python docs/results/2026-11-26-sampled-trees/sampled_tau.py 10 64 1.0 chain3,t6,t8,t12 topk adaptive  # at 902f049^
python docs/results/2026-11-26-sampled-trees/sampled_tau.py 10 64 1.0 chain3,t6,t8 topk adaptive      # at 902f049

# Which sampled shape: interleaved per prompt, 30 MT-bench questions x 96 tokens, T=1 -> sampled_ab_t1.log
python docs/results/2026-11-26-sampled-trees/sampled_ab.py 30 96 1.0 chain2,r3,r2x,r3d,t6,r4d

# MT-bench, first 40 questions, T=1, 128 new tokens: EAGLE-3 with its default sampled tree (r3d) and its dynamic twin
specdec bench --methods vanilla hf-generate eagle3 --dynamic-rows --dataset mtbench --temperatures 1 --limit 40 \
  --max-new-tokens 128 --threads 2 --no-progress --fresh --out docs/results/2026-11-26-sampled-trees/mtbench-t1
