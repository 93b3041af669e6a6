#!/bin/sh
# 2026-11-30: draft heads on int8 weights with float inputs. Intel Xeon (family 6 model 106, AVX-512 + VNNI, 2 cores,
# shared VM), 2 threads, torch 2.13.0+cpu, measured alone. D is this folder.
D=docs/results/2026-11-30-draft-w8-intel-f6m106

# tau on fixed 16-node trees, six ways of running the head's linears (-> tau_w8.txt; tau_w8_before.txt is the
# script's first form run at 7980f7d, before the change)
.venv/bin/python $D/tau_w8.py 8 16

# In the loop, vanilla / EAGLE-3 / composite, three ways each, interleaved per prompt (the MT-bench runs with the
# script's first form at e457322: max_len 1024)
.venv/bin/python $D/draft_w8_ab.py --prompts 12 --new-tokens 96                    # -> ab_t0_mtbench.txt
.venv/bin/python $D/draft_w8_ab.py --prompts 12 --new-tokens 96 --temperature 1    # -> ab_t1_mtbench.txt
.venv/bin/python $D/draft_w8_ab.py --prompts 24 --new-tokens 96 --temperature 1 --dataset spec-bench  # -> ab_t1_specbench.txt
.venv/bin/python $D/draft_w8_ab.py --prompts 24 --new-tokens 96 --temperature 1 --dataset spec-bench --seed 1  # -> ab_t1_specbench_seed1.txt

# The kernels alone, cold (-> w8_micro_avx512.txt, w8_micro_avx2.txt)
.venv/bin/python $D/w8_micro.py 0
.venv/bin/python $D/w8_micro.py 1

# draft_kernel_table.json: the measured table (cache_dir()/kernels/float32-2t-*.json with kernels int8, w8), as
# written by the first drafter built after the change
