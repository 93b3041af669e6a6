#!/bin/sh
# 2026-11-26 (second session): the shipped EAGLE-3 head continues over self-distilled sequences 3712-6591.
# Intel Xeon (family 6 model 207, AVX-512 + AMX, 2 cores, shared VM), 2 threads, torch 2.13.0+cpu,
# transformers 5.24.0, one job at a time.

# Training step speed, fp32 vs bf16 autocast, 30 steps each on sequences 3712-3751 (same data, same init):
for mp in no bf16; do
  specdec train eagle3 --data data/self-distilled/smollm2-135m-instruct --skip-sequences 3712 --max-conversations 40 \
    --max-len 1024 --features-dir runs/tfeat --init-head specdec/heads/smollm2-135m-instruct/eagle3 --lr 1e-4 \
    --max-steps 30 --no-progress --set steps=3 --set eval_tau_prompts=0 --mixed-precision $mp --max-heldout 2 \
    --out runs/t-$mp
done

# The continuation (features extracted into the cache first, then one epoch):
OMP_NUM_THREADS=2 specdec train eagle3 --data data/self-distilled/smollm2-135m-instruct --skip-sequences 3712 \
  --max-conversations 2880 --max-len 1024 --features-dir runs/sd3h-features \
  --init-head specdec/heads/smollm2-135m-instruct/eagle3 --lr 1e-4 --epochs 1 --save-every 256 --no-progress \
  --set steps=3 --set eval_tau_prompts=32 --out runs/e3c/run

# Paired held-out tau, previous shipped head vs the continued one (-> heldout_tau.json):
PYTHONPATH=scripts python scripts/heldout_tau.py specdec/heads/smollm2-135m-instruct/eagle3 runs/e3c/run/head \
  --prompts 50 --new-tokens 128 --total-tokens 16 --threads 2 --out docs/results/2026-11-26-eagle3-continued/heldout_tau.json

# Ship (bf16, card from the run; runs/ship/eagle3 -> runs/e3c/run):
python scripts/ship_heads.py --runs runs/ship --only eagle3 \
  --hardware "Intel Xeon (family 6 model 207, 2 logical cores, AVX-512 and AMX, shared VM), CPU only, 2 torch threads" \
  --note "eagle3=Continued from the previous shipped head over self-distilled sequences 3712-6591 (762,105 response \
tokens, 2,880 steps at lr 1e-4, 27 min of training after 20 min of feature extraction). Paired held-out tau (50 \
prompts, 128 new tokens, 16-node dynamic tree, bf16 weights): 2.015 -> 2.050 (+0.034 +- 0.010), \
docs/results/2026-11-26-eagle3-continued/heldout_tau.json."
# Then by hand: the card's /work/main/ path prefixes removed (ship_head records them relative since d53cc0f), and the
# MT-bench sentence of paired_mtbench.txt appended to the notes of README.md and training.json.

# MT-bench, all 80 questions, T=0 and T=1, with the 16-node tree (new head):
specdec bench --methods vanilla hf-generate eagle3 --tree-sizes 16 --dataset mtbench --temperatures 0 1 \
  --max-new-tokens 128 --threads 2 --no-progress --out docs/results/2026-11-26-eagle3-continued/mtbench-t0-t1

# tau on the questions shared with the previous head's runs (-> paired_mtbench.txt):
D=docs/results/2026-11-26-eagle3-continued
python $D/paired_mtbench.py $D/mtbench-t0-t1/results.jsonl docs/results/2026-11-25-cpu-verify/mtbench-t0/results.jsonl eagle3@16 0
python $D/paired_mtbench.py $D/mtbench-t0-t1/results.jsonl docs/results/2026-11-26-level-stop/mtbench-t0-t1/results.jsonl eagle3 0
python $D/paired_mtbench.py $D/mtbench-t0-t1/results.jsonl docs/results/2026-11-26-level-stop/mtbench-t0-t1/results.jsonl eagle3 1

# The fast path on this machine (-> fastpath_intel.txt, fastpath_intel.json):
python benchmarks/fastpath.py --prompts 4 --new-tokens 64 --repeats 5 --out $D/fastpath_intel.json

# The same with every linear packed (auto's AMD choice) -> fastpath_intel_onednn.txt/.json:
SPECDEC_CPU_GEMM=onednn python benchmarks/fastpath.py --prompts 4 --new-tokens 64 --repeats 5 --out $D/fastpath_intel_onednn.json

# Read bandwidth (-> bandwidth.txt): torch.randn(2**28).sum(), 5 times after 2 warm-ups, 2 threads
