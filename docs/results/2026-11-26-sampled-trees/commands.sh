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

# HASS part 2 (the EAGLE-1 part 2 of 2026-11-25 at equal data: sequences 0-1,983, lr 1e-4, one epoch, no top-K),
# continued from the part-1 HASS head (its training.json written first, so the card keeps the lineage):
specdec train hass --data data/self-distilled/smollm2-135m-instruct --max-conversations 1984 --max-len 1024 \
  --features-dir runs/sd0-features --init-head runs/s7/hass-ep2-sd2/head --lr 1e-4 --epochs 1 \
  --save-every 256 --no-progress --set eval_tau_prompts=32 --set topk_weight=0 --set 'eval_steps=[992]' \
  --out runs/s8/hass-ep2-sd0      # -> hass_part2_curve.jsonl, hass_part2_eval.json
# Paired held-out tau of the new HASS head (50 prompts x 128 tokens, 16 nodes, bf16); paired with the counts of
# EAGLE-1 part 2 and HASS part 1 in ../2026-11-25-cpu-verify/heldout_tau.json (same prompts, deterministic):
python scripts/heldout_tau.py runs/s8/hass-ep2-sd0/head --prompts 50 --new-tokens 128 --total-tokens 16 \
  --threads 2 --out heldout_tau_hass_part2.json
# Ship both part-2 heads (bf16, shortlist kept):
python docs/results/2026-11-26-sampled-trees/ship_part2.py
# MT-bench tau on 16-node trees with the shipped part-2 heads (EAGLE-3 unchanged: its counts are in
# ../2026-11-25-cpu-verify/tau16.json):
python docs/results/2026-11-25-cpu-verify/tau16.py tau16_part2.json eagle2 hass

# MT-bench, first 20 questions, T=0.7: the three heads with the default sampled tree and their dynamic twins
specdec bench --methods vanilla eagle2 hass eagle3 --dynamic-rows --dataset mtbench --temperatures 0.7 --limit 20 \
  --max-new-tokens 128 --threads 2 --no-progress --fresh --out docs/results/2026-11-26-sampled-trees/mtbench-t07
