"""Plot and tabulate held-out τ against training tokens from training runs' ``curve.jsonl`` + ``eval.json``.

    python scripts/tau_curve.py /work/runs/eagle3 /work/runs/eagle1 /work/runs/hass --out docs/results/DIR

Writes ``tau_vs_tokens.png`` and ``tau_vs_tokens.md`` (one row per evaluation point) to ``--out``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from specdec.train.run_folder import curve_points  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", type=Path, nargs="+", help="specdec train output folders")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    lines = [
        "| run | recipe | step | scored slots seen | α₁ (held-out chain) | chain τ | dynamic-tree τ |",
        "|---|---|---|---|---|---|---|",
    ]
    fig, ax = plt.subplots(figsize=(6, 4))
    for run in args.runs:
        recipe = json.loads((run / "train_config.json").read_text())["recipe"]
        rows = curve_points(run)
        for r in rows:
            tau = f"{r['tau']:.3f}" if r.get("tau") is not None else "n/a"
            lines.append(
                f"| {run.name} | {recipe} | {r['step']} | {r['trained_tokens']:,} | {r['alpha'][0]:.3f} | "
                f"{r['chain_tau']:.3f} | {tau} |"
            )
        ax.plot([r["trained_tokens"] for r in rows], [r["tau"] for r in rows], marker="o", label=recipe)
    ax.set_xlabel("scored training tokens seen")
    ax.set_ylabel("held-out dynamic-tree τ")
    ax.set_title("τ against training tokens (SmolLM2-135M-Instruct, CPU)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out / "tau_vs_tokens.png", dpi=120)
    (args.out / "tau_vs_tokens.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
