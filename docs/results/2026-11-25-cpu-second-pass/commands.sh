#!/bin/bash
# Second pass of the EAGLE-3 head over all self-distilled responses (issue 11), 2026-11-25, 2-core AMD EPYC (Zen 5).
# Part 1: continue the head shipped earlier over sequences 1,984-3,711 (the feature cache of that run);
# step 0 evaluates the parent on the same 32 held-out prompts.
specdec train eagle3 --data data/self-distilled/smollm2-135m-instruct --skip-sequences 1984 \
    --max-conversations 100000 --max-len 1024 --features-dir runs/sd2-features \
    --init-head specdec/heads/smollm2-135m-instruct/eagle3 --lr 1e-4 --epochs 1 --save-every 256 --no-progress \
    --set eval_tau_prompts=32 --set steps=3 --set 'eval_steps=[0,864]' --out runs/s6/e3-ep2-sd2
# Part 2: features of sequences 0-1,983 into a new cache (23.5 min), then continue part 1 over them.
SD0="--data data/self-distilled/smollm2-135m-instruct --max-conversations 1984 --max-len 1024 --features-dir runs/sd0-features"
specdec train eagle3 $SD0 --extract-only --no-progress --out runs/s6/extract-sd0
specdec train eagle3 $SD0 --init-head runs/s6/e3-ep2-sd2/head --lr 1e-4 --epochs 1 --save-every 256 \
    --no-progress --set eval_tau_prompts=32 --set steps=3 --set 'eval_steps=[992]' --out runs/s6/e3-ep2-sd0
# Paired held-out comparison (parent, part 1, part 2), 50 held-out prompts x 128 new tokens, weights in bf16.
python scripts/heldout_tau.py specdec/heads/smollm2-135m-instruct/eagle3 runs/s6/e3-ep2-sd2/head \
    runs/s6/e3-ep2-sd0/head --prompts 50 --new-tokens 128 --total-tokens 16 32 --threads 2 \
    --out docs/results/2026-11-25-cpu-second-pass/heldout_tau.json
# Ship part 2 (bf16, model card): ship_e3.py (this folder) calls specdec.train.card.ship_head.
# MT-bench with the shipped head.
specdec bench --methods vanilla hf-generate eagle3 --tree-sizes 16 --dataset mtbench --temperatures 0 \
    --max-new-tokens 128 --threads 2 --out runs/s6/mt-t0
specdec bench --methods vanilla hf-generate eagle3 --dataset mtbench --temperatures 1 --max-new-tokens 128 \
    --limit 20 --threads 2 --out runs/s6/mt-t1
