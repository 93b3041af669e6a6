#!/bin/sh
# 2026-11-30: sampling's small per-cycle steps in native code. Intel Xeon (family 6 model 106, AVX-512 + VNNI,
# 2 cores, shared VM), 2 threads, torch 2.13.0+cpu, measured alone. D is this folder.
D=docs/results/2026-11-30-native-steps-intel-f6m106

# The steps alone, hot (-> native_micro.txt)
.venv/bin/python $D/native_micro.py

# In the loop: vanilla / EAGLE-3 / composite, tensor form against native form, interleaved per prompt
.venv/bin/python $D/native_steps_ab.py --prompts 24 --new-tokens 96 --dataset spec-bench   # -> ab_t1_specbench.txt (code 796f0f7)
.venv/bin/python $D/native_steps_ab.py --prompts 24 --new-tokens 96 --dataset spec-bench --seed 1  # -> ab_t1_specbench_seed1.txt
.venv/bin/python $D/native_steps_ab.py --prompts 12 --new-tokens 96 --temperature 0.7 --top-p 0.9  # -> ab_t07_topp09_mtbench.txt

# *_first.txt: the same commands (12 MT-bench at T = 1; Spec-Bench 24 at T = 1; 12 MT-bench at T = 0.7, top-p 0.9)
# with the first form of the kernels (af01bd7: the residual row in float64 element by element, one partial sum per
# stretch, draws allocating their buffers); the native plan + residual row then took 627 us in native_micro.py.
