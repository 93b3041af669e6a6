"""Paired τ differences between any two heads or methods decoded on the same prompts.

    python docs/results/2026-11-26-e1-hass-continued/paired.py A_FILE:A_NAME B_FILE:B_NAME [...more pairs]

Each side names a JSON file and an entry in it: a head folder of a ``scripts/heldout_tau.py`` report (16-node rows)
or a method of a ``tau16.py`` report (MT-bench); or a ``specdec bench`` ``results.jsonl`` and a method label in it
(e.g. ``eagle3@16``; its T=0 rows in question order, forwards = new tokens / τ). All give per-prompt ``(tokens, target
forwards)``; the printed difference is ``τ_B - τ_A`` with its paired standard error over prompts
(``paired_difference`` of heldout_tau.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "2026-11-26-eagle3-continued"))
from heldout_tau import paired_difference  # noqa: E402
from paired_mtbench import rows as bench_rows  # noqa: E402


def counts(spec: str) -> list[tuple[float, float]]:
    """Per-prompt ``(tokens, forwards)`` of ``FILE:NAME``."""
    path, name = spec.rsplit(":", 1)
    if path.endswith(".jsonl"):
        mine = bench_rows(path, name, 0.0)
        if not mine:
            raise SystemExit(f"no T=0 rows of {name!r} in {path}")
        ordered = sorted(mine.values(), key=lambda r: int(r["prompt_id"].rsplit("/", 1)[1]))
        return [(r["new_tokens"], r["new_tokens"] / r["tau"]) for r in ordered]
    report = json.loads(Path(path).read_text())
    if "trees" in report:
        rows = {r["head"]: r["counts"] for r in report["trees"]["16"]}
    else:
        rows = {m: v["per_prompt"] for m, v in report["methods"].items()}
    if name not in rows:
        raise SystemExit(f"{name!r} not in {path}; it has {sorted(rows)}")
    return [tuple(c) for c in rows[name]]


def main() -> None:
    specs = sys.argv[1:]
    if len(specs) < 2 or len(specs) % 2:
        raise SystemExit(__doc__)
    for a, b in zip(specs[::2], specs[1::2], strict=True):
        ca, cb = counts(a), counts(b)
        tau_a, tau_b = sum(t for t, _ in ca) / sum(f for _, f in ca), sum(t for t, _ in cb) / sum(f for _, f in cb)
        diff, se = paired_difference(ca, cb)
        print(f"{b} - {a}: {tau_b:.3f} - {tau_a:.3f} = {diff:+.3f} ± {se:.3f} ({len(ca)} prompts)")


if __name__ == "__main__":
    main()
