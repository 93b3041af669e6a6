"""τ of the EAGLE-3 lineage against the draft slots it has trained on, and what a log-linear fit asks for τ = 2.5.

    python docs/results/2026-11-26-fifth/lineage.py HEAD,HELDOUT_SPEC,MTBENCH_SPEC [...] [--target 2.5]

Each argument names one head of the lineage, oldest first: its folder (a shipped head with ``training.json``, or the
``head/`` folder of a finished run whose records and feature cache are still there) and
where its held-out and MT-bench τ were measured, each as ``FILE:NAME`` of ``paired.py`` (``-`` when not measured).
Slots seen (scored draft positions, epochs counted again) are summed over the head's recorded lineage.

The fit is ordinary least squares of τ on log2(slots), over all heads and over the last four; it reports the slope
(τ per doubling of training) and the slots at which the fitted line reaches ``--target``. An extrapolation, not a
measurement: it says how far the present recipe is from the target if the curve keeps its shape.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from specdec.train.card import head_facts, lineage_total

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "2026-11-26-e1-hass-continued"))
from paired import counts  # noqa: E402


def head_slots(head: str) -> int:
    """Slots seen by the head in folder ``head`` and by every head its lineage continued (:func:`head_facts`: a
    shipped head's ``training.json``, or the facts of the unshipped run whose ``head/`` it is)."""
    facts = head_facts(head)
    if facts is None:
        raise SystemExit(f"{head} has no training.json and is not a finished run's head folder")
    return int(lineage_total(facts, "scored_tokens"))


def tau(spec: str) -> float | None:
    if spec == "-":
        return None
    c = counts(spec)
    return sum(t for t, _ in c) / sum(f for _, f in c)


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """``(a, b)`` of τ = a + b·log2(slots), least squares."""
    xs, ys = [math.log2(s) for s, _ in points], [t for _, t in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("heads", nargs="+", help="HEAD,HELDOUT_FILE:NAME,MTBENCH_FILE:NAME, oldest first")
    p.add_argument("--target", type=float, default=2.5)
    args = p.parse_args()
    rows = []
    for item in args.heads:
        head, heldout, mtbench = item.split(",")
        rows.append((head, head_slots(head), tau(heldout), tau(mtbench)))
    print("| head | slots seen | held-out τ (50 × 128, 16 nodes) | MT-bench τ (80 × 128, 16 nodes, T=0) |")
    print("| --- | --- | --- | --- |")
    for head, slots, h, m in rows:
        print(f"| {head} | {slots:,} | {'–' if h is None else f'{h:.3f}'} | {'–' if m is None else f'{m:.3f}'} |")
    print()
    for col, name in ((2, "held-out"), (3, "MT-bench")):
        points = [(r[1], r[col]) for r in rows if r[col] is not None]
        for label, part in (("all heads", points), ("last four", points[-4:])):
            if len(part) < 3:
                continue
            a, b = fit(part)
            need = 2 ** ((args.target - a) / b) if b > 0 else math.inf
            print(
                f"{name}, {label} ({len(part)}): τ = {a:.3f} + {b:.4f}·log2(slots); {b:+.3f} per doubling; "
                f"τ {args.target} at {need:.3g} slots ({need / part[-1][0]:.3g}× the last head's)"
            )


if __name__ == "__main__":
    main()
