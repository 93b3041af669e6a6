# Recipe comparisons (issue 11), 2026-11-25, AMD EPYC family 26 (Zen 5), 2 cores, one run at a time.
# Every run: a fresh head, one epoch, lr 3e-4, seed 0, held-out tau on 32 held-out ShareGPT prompts (48 new tokens,
# dynamic tree of 32 nodes), chain acceptance on 50 held-out sequences.
SD="--data data/self-distilled/smollm2-135m-instruct --skip-sequences 1984 --max-conversations 100000 --max-len 1024 --features-dir runs/sd2-features"
COMMON="--lr 3e-4 --epochs 1 --save-every 128 --no-progress --set eval_tau_prompts=32"
specdec train eagle3 $SD $COMMON --draft-vocab-size 16384 --set train_sequences=384 --set 'eval_steps=[128,256]' --out e3-base
specdec train eagle3 $SD $COMMON --draft-vocab-size 16384 --set train_sequences=384 --set steps=3 --out e3-ttt3
specdec train eagle3 $SD $COMMON --draft-vocab-size 16384 --set train_sequences=384 --set init_from_target=true --out e3-init
specdec train eagle3 --max-conversations 146 --max-len 1024 --features-dir sgpt-features $COMMON --draft-vocab-size 16384 --out e3-sharegpt
specdec train hass $SD $COMMON --set train_sequences=384 --out hass-k10
specdec train hass $SD $COMMON --set train_sequences=384 --set topk_weight=0 --out hass-k0
specdec train eagle3 $SD $COMMON --draft-vocab-size 8192 --set train_sequences=384 --out e3-v8k
# twice the data
specdec train eagle3 $SD $COMMON --draft-vocab-size 16384 --set train_sequences=768 --set steps=3 --out e3-ttt3-768
specdec train eagle3 $SD $COMMON --draft-vocab-size 16384 --set train_sequences=768 --out e3-ttt7-768
specdec train eagle3 $SD $COMMON --draft-vocab-size 16384 --set steps=3 --save-every 256 --out e3-ttt3-1728  # the whole cache
# coverage of draft vocabularies
python scripts/draft_vocab_coverage.py --data data/self-distilled/smollm2-135m-instruct \
    --mtbench docs/results/2026-11-25-cpu-1m-compiled/zen5-t0/results.jsonl --out docs/results/2026-11-25-cpu-recipes
# drafting cost before/after (old = aad72d9 in a worktree, new = this commit), alternating three times
python benchmarks/cycle_split.py --methods eagle3 --prompts 8 --new-tokens 64 --threads 2
