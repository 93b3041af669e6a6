#!/bin/bash
# Session of 2026-11-25 (night), 2-core AMD EPYC (Zen 5), torch 2.13.0+cpu, 2 threads, one job at a time.
#
# 1. Verification and bookkeeping (issue "CPU fast path"): ABAB of benchmarks/cycle_split.py, run from a checkout
#    of the commit before (648dd70, /tmp/chainE) and from the working tree in turn, the training job paused.
#    abab_greedy.log: commit 1d02e2e (greedy plan without [N, V] rows), T=0.
#    abab_multiround.log: + 7ff54b2 (no compaction for a lone root) and the sparse multi-round plan, T=1 then T=0.
#    abab_sampler.log: + the inverse-CDF sampler (401cb5f), T=1.
for side in /tmp/chainE /work/main; do
  (cd $side && PYTHONPATH=$side python benchmarks/cycle_split.py --methods eagle3 --prompts 8 --new-tokens 64 \
      --temperature 1)
done
#
# 2. Second pass for EAGLE-1 and HASS (issue "Heads that pay on a CPU"), same data and schedule for both.
SD2="--data data/self-distilled/smollm2-135m-instruct --skip-sequences 1984 --max-conversations 100000 --max-len 1024 --features-dir runs/sd2-features"
SD0="--data data/self-distilled/smollm2-135m-instruct --max-conversations 1984 --max-len 1024 --features-dir runs/sd0-features"
COMMON="--lr 1e-4 --epochs 1 --save-every 256 --no-progress --set eval_tau_prompts=32"
#    EAGLE-1 part 1 (previous session) and part 2 (this one, not shipped: HASS has no part 2 yet).
specdec train eagle1 $SD2 --init-head specdec/heads/smollm2-135m-instruct/eagle1 $COMMON --set 'eval_steps=[0]' \
    --out runs/s6/e1-ep2-sd2
specdec train eagle1 $SD0 --init-head runs/s6/e1-ep2-sd2/head $COMMON --set 'eval_steps=[992]' \
    --out runs/s7/e1-ep2-sd0
#    HASS part 1, without the top-K loss.
specdec train hass $SD2 --init-head specdec/heads/smollm2-135m-instruct/hass $COMMON --set topk_weight=0 \
    --set 'eval_steps=[0]' --out runs/s7/hass-ep2-sd2
#    Paired held-out tau (50 held-out prompts x 128 tokens, 16-node trees, bf16 weights); the EAGLE-1 part-1 counts
#    come from the previous session's run of the same script (same prompts; the shipped head's counts repeat exactly).
python scripts/heldout_tau.py specdec/heads/smollm2-135m-instruct/eagle1 runs/s7/e1-ep2-sd0/head \
    specdec/heads/smollm2-135m-instruct/hass runs/s7/hass-ep2-sd2/head --prompts 50 --new-tokens 128 \
    --total-tokens 16 --threads 2 --out heldout_tau.json
#    Ship both part-1 heads (bf16, shortlist kept): ship_e1_hass.py (this folder).
#
# 3. MT-bench with the shipped heads and the new verification.
specdec bench --methods vanilla hf-generate eagle3 --tree-sizes 16 --dataset mtbench --temperatures 0 \
    --max-new-tokens 128 --threads 2 --out runs/s7/mt-t0
python tau16.py tau16.json eagle2 hass eagle3  # 16-node dynamic trees, T=0, all 80 questions (this folder)
specdec bench --methods vanilla hf-generate eagle3 --dataset mtbench --temperatures 1 --max-new-tokens 128 \
    --limit 20 --threads 2 --out runs/s7/mt-t1
