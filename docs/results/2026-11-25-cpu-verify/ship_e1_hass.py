"""Ship the second-pass part-1 heads of EAGLE-1 and HASS (same data, same schedule) in bf16, keeping the shortlist."""

import shutil

import torch

from specdec.train.card import ship_head

HW = "AMD EPYC family 26 (Zen 5, 2 logical cores, AVX-512, shared VM), CPU only, 2 torch threads"
COMMON = (
    "A second pass over self-distilled sequences 1,984-3,711 (`--skip-sequences 1984`, the sequences the parent was "
    "continued on), one epoch at lr 1e-4, 1,728 steps. EAGLE-1 and HASS got the same pass (HASS without its top-K "
    "loss, `--set topk_weight=0`, which did not pay in the recipe table), so the two heads compare the recipes at "
    "equal data and schedule. The draft shortlist (`draft_vocab.safetensors`, 16,384 ids) is the one shipped before."
)
RUNS = {
    "eagle1": ("runs/s6/e1-ep2-sd2", "EAGLE-1 head for SmolLM2-135M-Instruct"),
    "hass": ("runs/s7/hass-ep2-sd2", "EAGLE-1 head trained with HASS for SmolLM2-135M-Instruct"),
}
for kind, (run, title) in RUNS.items():
    dest = f"specdec/heads/smollm2-135m-instruct/{kind}"
    shortlist = f"/tmp/{kind}_draft_vocab.safetensors"
    shutil.copy(f"{dest}/draft_vocab.safetensors", shortlist)
    ship_head(run, dest, hardware=HW, title=title, notes=COMMON, dtype=torch.bfloat16)
    shutil.copy(shortlist, f"{dest}/draft_vocab.safetensors")
    print("shipped", kind, "from", run)
