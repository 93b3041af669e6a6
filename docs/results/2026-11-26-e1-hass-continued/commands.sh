#!/bin/sh
# 2026-11-26 (third session): the shipped EAGLE-1 and HASS heads continue over self-distilled sequences 3712-6591,
# the window the EAGLE-3 head got in the previous session (its feature cache, runs/sd3h-features, holds the
# final hidden state too, so no extraction was needed). Intel Xeon (family 6 model 207, AVX-512 + AMX, 2 cores,
# shared VM), 2 threads, torch 2.13.0+cpu, transformers 5.24.0, one job at a time.

# EAGLE-1 (-> eagle1_eval.json, eagle1_train_summary.txt):
OMP_NUM_THREADS=2 specdec train eagle1 --data data/self-distilled/smollm2-135m-instruct --skip-sequences 3712 \
  --max-conversations 2880 --max-len 1024 --features-dir runs/sd3h-features \
  --init-head specdec/heads/smollm2-135m-instruct/eagle1 --lr 1e-4 --epochs 1 --save-every 256 --no-progress \
  --set eval_tau_prompts=32 --out runs/e1c/run

# HASS, the shipped HASS recipe (3 passes, top-K loss off) (-> hass_eval.json, hass_train_summary.txt):
OMP_NUM_THREADS=2 specdec train hass --data data/self-distilled/smollm2-135m-instruct --skip-sequences 3712 \
  --max-conversations 2880 --max-len 1024 --features-dir runs/sd3h-features \
  --init-head specdec/heads/smollm2-135m-instruct/hass --lr 1e-4 --epochs 1 --save-every 256 --no-progress \
  --set topk_weight=0 --set eval_tau_prompts=32 --out runs/hc/run

# Paired held-out tau of the four heads, previous shipped EAGLE-1 first (-> heldout_tau.json):
PYTHONPATH=scripts python scripts/heldout_tau.py specdec/heads/smollm2-135m-instruct/eagle1 runs/e1c/run/head \
  specdec/heads/smollm2-135m-instruct/hass runs/hc/run/head \
  --prompts 50 --new-tokens 128 --total-tokens 16 --threads 2 --out docs/results/2026-11-26-e1-hass-continued/heldout_tau.json
D=docs/results/2026-11-26-e1-hass-continued
python $D/paired.py $D/heldout_tau.json:specdec/heads/smollm2-135m-instruct/eagle1 $D/heldout_tau.json:runs/e1c/run/head \
  $D/heldout_tau.json:specdec/heads/smollm2-135m-instruct/hass $D/heldout_tau.json:runs/hc/run/head \
  $D/heldout_tau.json:runs/e1c/run/head $D/heldout_tau.json:runs/hc/run/head \
  $D/heldout_tau.json:specdec/heads/smollm2-135m-instruct/eagle1 $D/heldout_tau.json:specdec/heads/smollm2-135m-instruct/hass \
  > $D/heldout_pairs.txt

# Training summaries and the runs' own evaluations (the JSON block at the end of each train.log):
python $D/block_summary.py runs/e1c/run/log.jsonl > $D/eagle1_train_summary.txt
python $D/block_summary.py runs/hc/run/log.jsonl > $D/hass_train_summary.txt

# Ship both (bf16; ship_head keeps the folder's draft shortlist; runs/ship27/{eagle1,hass} -> the two runs):
HW="Intel Xeon (family 6 model 207, 2 logical cores, AVX-512 and AMX, shared VM), CPU only, 2 torch threads"
COMMON="Continued from the previous shipped head over self-distilled sequences 3712-6591 (762,105 response tokens, \
the window the EAGLE-3 head got before; 2,880 steps at lr 1e-4, one epoch, features from the EAGLE-3 run's cache, so \
no extraction)."
python scripts/ship_heads.py --runs runs/ship27 --only eagle1 hass --hardware "$HW" \
  --note "eagle1=$COMMON Paired held-out tau (50 prompts, 128 new tokens, 16-node dynamic tree, bf16 weights): \
1.927 -> 1.965 (+0.038 +- 0.013), docs/results/2026-11-26-e1-hass-continued/heldout_tau.json. The draft shortlist \
(draft_vocab.safetensors, 16,384 ids) is the one shipped before." \
  --note "hass=$COMMON HASS recipe as before: 3 passes, top-K loss off (--set topk_weight=0). Paired held-out tau \
(50 prompts, 128 new tokens, 16-node dynamic tree, bf16 weights): 1.880 -> 1.942 (+0.062 +- 0.017); against the \
continued EAGLE-1 head -0.023 +- 0.014 (was -0.047 +- 0.017), docs/results/2026-11-26-e1-hass-continued/heldout_tau.json. \
The draft shortlist (draft_vocab.safetensors, 16,384 ids) is the one shipped before."
# Then by hand: the MT-bench sentence appended to the notes of README.md and training.json of both heads.

# MT-bench tau on 16-node trees, all 80 questions, T=0, shipped heads (-> tau16.json), paired with the previous heads:
python docs/results/2026-11-25-cpu-verify/tau16.py $D/tau16.json eagle2 hass
O=docs/results/2026-11-26-sampled-trees/tau16_part2.json
python $D/paired.py $O:eagle2 $D/tau16.json:eagle2 $O:hass $D/tau16.json:hass $D/tau16.json:eagle2 $D/tau16.json:hass \
  > $D/mtbench_pairs.txt
