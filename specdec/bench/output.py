"""A results folder's report files: ``results.md`` (:mod:`specdec.bench.report`) and the PNGs
(:mod:`specdec.bench.plots`), written from its ``results.jsonl`` and ``runs.jsonl``."""

from __future__ import annotations

from pathlib import Path

from specdec.bench.plots import write_plots
from specdec.bench.report import load_rows, load_runs, markdown

__all__ = ["write_report"]


def write_report(out_dir: str | Path, plots: bool = True) -> Path:
    """Write ``out_dir/results.md`` (and the PNGs, where ``plots``: matplotlib is imported only then); returns the
    markdown path."""
    out = Path(out_dir)
    rows, runs = load_rows(out), load_runs(out)
    path = out / "results.md"
    path.write_text(markdown(rows, runs))
    if plots:
        write_plots(rows, runs, out)
    return path
