#!/bin/sh
# 2026-11-26: HASS part 2 with the passes weighted toward depth 1 (pass_decay 0.5: loss weights 1, 0.5, 0.25), the
# shipped HASS part 2 otherwise (same data, schedule and starting head). AMD EPYC family 26 (Zen 5), 2 threads.
specdec train hass --data data/self-distilled/smollm2-135m-instruct --max-conversations 1984 --max-len 1024 \
  --features-dir runs/sd0-features --init-head runs/s7/hass-ep2-sd2/head --lr 1e-4 --epochs 1 \
  --save-every 256 --no-progress --set eval_tau_prompts=32 --set topk_weight=0 --set pass_decay=0.5 \
  --set 'eval_steps=[992]' --out runs/s9/hass-pd05-sd0          # -> hass_pd05_curve.jsonl, hass_pd05_eval.json
# Paired held-out tau (50 prompts x 128 tokens, 16 nodes, bf16), paired with the stored counts of the shipped
# HASS part 2 (../2026-11-26-sampled-trees/heldout_tau_hass_part2.json) and EAGLE-1 part 2
# (../2026-11-25-cpu-verify/heldout_tau.json); the decoding is deterministic, so the same prompts give the same counts:
python scripts/heldout_tau.py runs/s9/hass-pd05-sd0/head --prompts 50 --new-tokens 128 --total-tokens 16 \
  --threads 2 --out heldout_tau_hass_pd05.json
