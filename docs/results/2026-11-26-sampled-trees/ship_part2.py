"""Ship the part-2 heads of EAGLE-1 and HASS (second pass over sequences 0-1,983) in bf16, keeping the shortlist."""

import json
import shutil
from pathlib import Path

import torch

from specdec.train.card import ship_head

HW = "AMD EPYC family 26 (Zen 5, 2 logical cores, AVX-512, shared VM), CPU only, 2 torch threads"
COMMON = (
    "Part 2 of a second pass over the self-distilled data: continued from the part-1 head (sequences 1,984-3,711, "
    "lr 1e-4) over sequences 0-1,983 (`--max-conversations 1984`), one epoch at lr 1e-4, 1,984 steps. EAGLE-1 and "
    "HASS got the same two parts (HASS without its top-K loss, `--set topk_weight=0`, which did not pay in the recipe "
    "table), so the two heads compare the recipes at equal data and schedule. The draft shortlist "
    "(`draft_vocab.safetensors`, 16,384 ids) is the one shipped before."
)
RUNS = {
    "eagle1": ("runs/s7/e1-ep2-sd0", "EAGLE-1 head for SmolLM2-135M-Instruct"),
    "hass": ("runs/s8/hass-ep2-sd0", "EAGLE-1 head trained with HASS for SmolLM2-135M-Instruct"),
}
SOURCE = "training steps (log.jsonl, pauses of 20 s or more left out)"


def step_wall(run: str) -> tuple[float, str]:
    """Seconds of training steps, gaps of 20 s or more between logged steps left out (SIGSTOP pauses while tests and
    benchmarks ran, and the mid-run evaluation)."""
    log = [json.loads(line) for line in Path(run, "log.jsonl").read_text().splitlines()]
    gaps = [b["wall_s"] - a["wall_s"] for a, b in zip(log, log[1:], strict=False)]
    return log[0]["wall_s"] + sum(g for g in gaps if g < 20), SOURCE


for kind, (run, title) in RUNS.items():
    dest = f"specdec/heads/smollm2-135m-instruct/{kind}"
    shortlist = f"/tmp/{kind}_draft_vocab.safetensors"
    shutil.copy(f"{dest}/draft_vocab.safetensors", shortlist)
    ship_head(run, dest, hardware=HW, title=title, notes=COMMON, dtype=torch.bfloat16, wall=step_wall(run))
    shutil.copy(shortlist, f"{dest}/draft_vocab.safetensors")
    print("shipped", kind, "from", run)
