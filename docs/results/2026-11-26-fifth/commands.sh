#!/bin/sh
# 2026-11-26 (fifth session): MT-bench tau of the HASS head shipped last session; second passes of the EAGLE-3 head at
# a lower learning rate; the EAGLE-3 lineage's held-out curve; the compiled target on this Intel CPU.
# Intel Xeon (family 6 model 207, AVX-512 + AMX, 2 cores, shared VM), 2 threads, torch 2.13.0+cpu,
# transformers 5.24.0, one job at a time (runs/s29/chain*.sh ran these in order).
D=docs/results/2026-11-26-fifth
P=docs/results/2026-11-26-e1-hass-continued
S=specdec/heads/smollm2-135m-instruct/eagle3

# MT-bench 16-node tau (T=0, 80 questions, 128 new tokens) of the shipped HASS head (-> tau16_hass.json), paired with
# EAGLE-1 and the previous HASS head (tau16.json of 2026-11-26-e1-hass-continued) and EAGLE-3 (bench results.jsonl):
python docs/results/2026-11-25-cpu-verify/tau16.py $D/tau16_hass.json hass
python $P/paired.py $P/tau16.json:eagle2 $D/tau16_hass.json:hass $P/tau16.json:hass $D/tau16_hass.json:hass \
  $D/tau16_hass.json:hass docs/results/2026-11-26-eagle3-continued/mtbench-t0-t1/results.jsonl:eagle3@16 \
  > $D/mtbench_pairs_hass.txt

# EAGLE-3, second pass 1 (e3e): from the unshipped head of last session's run (runs/e3d/run/head, which had seen
# sequences 0-9471 once after 0-3711 twice) over sequences 3712-6591 again, lr 5e-5, data order seed 1, features from
# last session's cache (no extraction):
OMP_NUM_THREADS=2 specdec train eagle3 --data data/self-distilled/smollm2-135m-instruct --skip-sequences 3712 \
  --max-conversations 2880 --max-len 1024 --features-dir runs/sd3h-features \
  --init-head runs/e3d/run/head --lr 5e-5 --epochs 1 --save-every 256 --no-progress \
  --set steps=3 --set eval_tau_prompts=32 --set seed=1 --out runs/e3e/run
# second pass 2 (e3f): from e3e over sequences 6592-9471 again, same settings, so all of 0-9471 has been seen twice:
OMP_NUM_THREADS=2 specdec train eagle3 --data data/self-distilled/smollm2-135m-instruct --skip-sequences 6592 \
  --max-conversations 2880 --max-len 1024 --features-dir runs/sd4-features \
  --init-head runs/e3e/run/head --lr 5e-5 --epochs 1 --save-every 256 --no-progress \
  --set steps=3 --set eval_tau_prompts=32 --set seed=1 --out runs/e3f/run

# The lineage's earlier shipped heads, from git history:
for c in 6a13e83 a4a9507 3708fa0 95cc474; do
  mkdir -p runs/s29/heads/e3-$c
  for f in config.json model.safetensors training.json; do git show $c:$S/$f > runs/s29/heads/e3-$c/$f; done
done
# Held-out tau (50 held-out ShareGPT prompts, 128 new tokens, 16-node trees, weights rounded to bf16):
PYTHONPATH=scripts python scripts/heldout_tau.py runs/e3e/run/head runs/s29/heads/e3-6a13e83 \
  runs/s29/heads/e3-a4a9507 runs/s29/heads/e3-3708fa0 --prompts 50 --new-tokens 128 --total-tokens 16 \
  --threads 2 --out $D/heldout_tau_lineage.json
PYTHONPATH=scripts python scripts/heldout_tau.py runs/e3f/run/head --prompts 50 --new-tokens 128 \
  --total-tokens 16 --threads 2 --out $D/heldout_tau_e3f.json
# MT-bench 16-node tau of the second-pass heads, weights rounded to bf16 as shipped (a copy of the run's head folder):
python docs/results/2026-11-25-cpu-verify/tau16.py $D/tau16_e3e.json eagle3=runs/s29/heads/e3e-bf16
python docs/results/2026-11-25-cpu-verify/tau16.py $D/tau16_e3f.json eagle3=runs/s29/heads/e3f-bf16
# Pairs (held-out: last session's JSON holds the shipped head and e3d):
F=docs/results/2026-11-26-fourth/heldout_tau_e3.json
L=$D/heldout_tau_lineage.json
python $P/paired.py $F:$S $L:runs/e3e/run/head $F:runs/e3d/run/head $L:runs/e3e/run/head \
  $L:runs/e3e/run/head $D/heldout_tau_e3f.json:runs/e3f/run/head $F:$S $D/heldout_tau_e3f.json:runs/e3f/run/head \
  $F:runs/e3d/run/head $D/heldout_tau_e3f.json:runs/e3f/run/head > $D/heldout_pairs.txt
B=docs/results/2026-11-26-eagle3-continued/mtbench-t0-t1/results.jsonl
E=eagle3=runs/s29/heads/e3e-bf16
G=eagle3=runs/s29/heads/e3f-bf16
python $P/paired.py $B:eagle3@16 $D/tau16_e3e.json:$E $B:eagle3@16 $D/tau16_e3f.json:$G $D/tau16_e3e.json:$E \
  $D/tau16_e3f.json:$G $D/tau16_hass.json:hass $D/tau16_e3f.json:$G $P/tau16.json:eagle2 $D/tau16_e3f.json:$G \
  > $D/mtbench_pairs_e3.txt
# The curve and its fits (-> lineage.txt; 5177d27 is the head shipped before this session, extracted like the others):
H=runs/s29/heads
python $D/lineage.py $H/e3-6a13e83,$L:$H/e3-6a13e83,- $H/e3-a4a9507,$L:$H/e3-a4a9507,- \
  $H/e3-3708fa0,$L:$H/e3-3708fa0,- \
  $H/e3-95cc474,docs/results/2026-11-26-eagle3-continued/heldout_tau.json:$S,docs/results/2026-11-25-cpu-verify/tau16.json:eagle3 \
  $H/e3-5177d27,$F:$S,$B:eagle3@16 runs/e3d/run/head,$F:runs/e3d/run/head,- \
  runs/e3e/run/head,$L:runs/e3e/run/head,$D/tau16_e3e.json:$E \
  runs/e3f/run/head,$D/heldout_tau_e3f.json:runs/e3f/run/head,$D/tau16_e3f.json:$G > $D/lineage.txt

# Ship e3f as the EAGLE-3 head (runs/ship29/eagle3 -> runs/e3f/run), and the HASS head again with its
# MT-bench figure added to the card's note (the weights are byte-identical):
HW="Intel Xeon (family 6 model 207, 2 logical cores, AVX-512 and AMX, shared VM), CPU only, 2 torch threads"
python scripts/ship_heads.py --runs runs/ship29 --only eagle3 --hardware "$HW" --note "eagle3=Two second passes ..."
python scripts/ship_heads.py --runs runs/ship28h --only hass --hardware "$HW" --note "hass=... MT-bench ..."
#   (the full note texts are the cards' training.json "notes")

# Training summaries (per block of 288 steps, from the runs' log.jsonl) and the runs' own evaluations:
python $P/block_summary.py runs/e3e/run/log.jsonl > $D/e3e_train_summary.txt
python $P/block_summary.py runs/e3f/run/log.jsonl > $D/e3f_train_summary.txt
# Epoch means quoted on the results page: the first pass over the e3e sequences (last session's e3c run), both second
# passes, and the last 576 fresh-data steps of e3d (-> epoch_means.txt):
for r in e3c e3e e3f; do python $P/block_summary.py runs/$r/run/log.jsonl --blocks 1; done >> $D/epoch_means.txt
python $P/block_summary.py runs/e3d/run/log.jsonl --blocks 5 | tail -1 >> $D/epoch_means.txt
cp runs/e3e/run/eval.json $D/e3e_eval.json
cp runs/e3f/run/eval.json $D/e3f_eval.json

# The compiled static-shape target against the eager fast path on this CPU (-> compiled_intel.{txt,json}):
python benchmarks/compiled.py --methods vanilla eagle3 --prompts 4 --new-tokens 64 --threads 2 \
  --json $D/compiled_intel.json
