"""Copy trained heads into the package (``specdec/heads/smollm2-135m-instruct/{eagle1,hass,eagle3}``) as bf16
safetensors in the official layouts, each with ``training.json`` and a ``README.md`` model card.

    python scripts/ship_heads.py --runs /work/runs --hardware "AMD EPYC, 2 cores, 1 torch thread per run"

``--runs`` holds one ``specdec train`` output folder per recipe, named ``eagle1``, ``hass`` and ``eagle3``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from specdec.methods import HEADS_DIR
from specdec.train.card import ship_head

TITLES = {
    "eagle1": "EAGLE-1 head for SmolLM2-135M-Instruct",
    "hass": "EAGLE-1 head trained with HASS for SmolLM2-135M-Instruct",
    "eagle3": "EAGLE-3 head for SmolLM2-135M-Instruct",
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=Path, required=True, help="folder with eagle1/, hass/, eagle3/ training runs")
    p.add_argument("--hardware", required=True, help="where the runs trained (free text for the model cards)")
    p.add_argument("--notes", default="", help="free text added to every card")
    p.add_argument("--only", nargs="*", default=list(TITLES), help="recipes to ship (default all)")
    p.add_argument("--note", action="append", default=[], metavar="KIND=TEXT", help="a note for one card")
    args = p.parse_args()
    notes = dict(n.split("=", 1) for n in args.note)
    for kind in args.only:
        text = "\n\n".join(t for t in (args.notes, notes.get(kind, "")) if t)
        dest = ship_head(args.runs / kind, HEADS_DIR / kind, args.hardware, TITLES[kind], text, torch.bfloat16)
        size = sum(f.stat().st_size for f in dest.iterdir()) / 2**20
        print(f"{kind}: {dest} ({size:.1f} MiB)")


if __name__ == "__main__":
    main()
