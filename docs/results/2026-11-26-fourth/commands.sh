#!/bin/sh
# 2026-11-26 (fourth session): the EAGLE-3 head continues over self-distilled sequences 6592-9471; EAGLE-1 continues,
# and HASS starts from the same shipped EAGLE-1 head (the HASS paper's protocol), over the first 1440 of them.
# Intel Xeon (family 6 model 207, AVX-512 + AMX, 2 cores, shared VM), 2 threads, torch 2.13.0+cpu,
# transformers 5.24.0, one job at a time (runs/s28/chain1.sh and chain2.sh ran these in order).
D=docs/results/2026-11-26-fourth
P=docs/results/2026-11-26-e1-hass-continued

# EAGLE-3: extract the window's features (target layers 2, 15, 27 and the final hidden state) and train
# (-> eagle3_eval.json, eagle3_train_summary.txt):
OMP_NUM_THREADS=2 specdec train eagle3 --data data/self-distilled/smollm2-135m-instruct --skip-sequences 6592 \
  --max-conversations 2880 --max-len 1024 --features-dir runs/sd4-features \
  --init-head specdec/heads/smollm2-135m-instruct/eagle3 --lr 1e-4 --epochs 1 --save-every 256 --no-progress \
  --set steps=3 --set eval_tau_prompts=32 --out runs/e3d/run
PYTHONPATH=scripts python scripts/heldout_tau.py specdec/heads/smollm2-135m-instruct/eagle3 runs/e3d/run/head \
  --prompts 50 --new-tokens 128 --total-tokens 16 --threads 2 --out $D/heldout_tau_e3.json

# EAGLE-1 continued, and HASS from the shipped EAGLE-1 head, over the first 1440 cached sequences (6592-8031) of the
# same cache (it holds the final hidden state), both lr 1e-4, one epoch; HASS with the shipped recipe (3 passes, top-K
# loss off) (-> eagle1_eval.json, hass_eval.json, *_train_summary.txt):
COMMON="--data data/self-distilled/smollm2-135m-instruct --skip-sequences 6592 --max-conversations 2880 \
  --max-len 1024 --features-dir runs/sd4-features --init-head specdec/heads/smollm2-135m-instruct/eagle1 \
  --lr 1e-4 --epochs 1 --save-every 256 --no-progress --set train_sequences=1440 --set eval_tau_prompts=32"
OMP_NUM_THREADS=2 specdec train eagle1 $COMMON --out runs/e1d/run
OMP_NUM_THREADS=2 specdec train hass $COMMON --set topk_weight=0 --out runs/hfe/run
PYTHONPATH=scripts python scripts/heldout_tau.py specdec/heads/smollm2-135m-instruct/eagle1 runs/e1d/run/head \
  specdec/heads/smollm2-135m-instruct/hass runs/hfe/run/head \
  --prompts 50 --new-tokens 128 --total-tokens 16 --threads 2 --out $D/heldout_tau_e1_hass.json
python $P/paired.py $D/heldout_tau_e1_hass.json:specdec/heads/smollm2-135m-instruct/eagle1 $D/heldout_tau_e1_hass.json:runs/e1d/run/head \
  $D/heldout_tau_e1_hass.json:specdec/heads/smollm2-135m-instruct/hass $D/heldout_tau_e1_hass.json:runs/hfe/run/head \
  $D/heldout_tau_e1_hass.json:runs/e1d/run/head $D/heldout_tau_e1_hass.json:runs/hfe/run/head \
  $D/heldout_tau_e1_hass.json:specdec/heads/smollm2-135m-instruct/eagle1 $D/heldout_tau_e1_hass.json:runs/hfe/run/head \
  > $D/heldout_pairs.txt

# Training summaries, the same-steps comparison and the runs' own evaluations (copied from RUN/eval.json):
python $P/block_summary.py runs/e3d/run/log.jsonl > $D/eagle3_train_summary.txt
python $P/block_summary.py runs/e1d/run/log.jsonl > $D/eagle1_train_summary.txt
python $P/block_summary.py runs/hfe/run/log.jsonl > $D/hass_train_summary.txt
python $D/same_steps.py runs/e1d/run/log.jsonl runs/hfe/run/log.jsonl > $D/same_steps_e1_hass.txt

# The EAGLE-3 run is not shipped (held-out +0.004 +- 0.011). Ship the HASS-from-EAGLE-1 head as the HASS head
# (bf16; ship_head keeps the folder's draft shortlist; runs/ship28h/hass -> runs/hfe/run):
HW="Intel Xeon (family 6 model 207, 2 logical cores, AVX-512 and AMX, shared VM), CPU only, 2 torch threads"
python scripts/ship_heads.py --runs runs/ship28h --only hass --hardware "$HW" --note "hass=Started from the \
shipped EAGLE-1 head (the HASS paper's protocol: HASS continues trained EAGLE-2 weights) and trained with the HASS \
recipe (3 passes, top-K loss off) over self-distilled sequences 6592-8031 (391,262 response tokens, 1,440 steps at lr \
1e-4, one epoch, 25.3 min). Paired held-out tau (50 prompts, 128 new tokens, 16-node dynamic tree, bf16 weights): \
1.982, against 1.942 for the previous HASS head (+0.040 +- 0.018), 1.961 for EAGLE-1 continued over the same sequences \
(+0.022 +- 0.012) and 1.965 for the shipped EAGLE-1 head (+0.017 +- 0.014), \
docs/results/2026-11-26-fourth/heldout_pairs.txt. The draft shortlist (draft_vocab.safetensors) is the one shipped before."
