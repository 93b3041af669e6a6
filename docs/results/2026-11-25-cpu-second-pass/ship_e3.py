"""Ship the second-pass EAGLE-3 head (run from the repository root; the run folder is runs/s6/e3-ep2-sd0)."""

import torch

from specdec.train.card import ship_head

HW = "AMD EPYC family 26 (Zen 5, 2 logical cores, AVX-512, shared VM), CPU only, 2 torch threads"
notes = (
    "A second pass over all 3,712 self-distilled responses with the recipe the comparisons chose (TTT 3, "
    "`--set steps=3`), at lr 1e-4, keeping the 16,384-token draft vocabulary. Part 1 (`runs/s6/e3-ep2-sd2`) "
    "continued the head shipped earlier on 2026-11-25 over sequences 1,984-3,711 "
    "(feature cache of the earlier run); "
    "part 2 (this run) continued part 1 over sequences 0-1,983 (`--max-conversations 1984`, a new feature cache, "
    "23.5 min of extraction). The lineage has now seen every self-distilled response twice. "
    "Paired held-out comparison against the parent (scripts/heldout_tau.py, 50 held-out prompts, 128 new tokens, "
    "weights in bf16): tau 1.983 -> 2.017 (+0.034 +- 0.012) on 16-node trees, 2.098 -> 2.130 (+0.032 +- 0.014) "
    "on 32-node trees."
)
d = ship_head(
    "runs/s6/e3-ep2-sd0",
    "specdec/heads/smollm2-135m-instruct/eagle3",
    hardware=HW,
    title="EAGLE-3 head for SmolLM2-135M-Instruct",
    notes=notes,
    dtype=torch.bfloat16,
)
print(d, sum(f.stat().st_size for f in d.iterdir()) / 2**20)
