"""Benchmark harness: interleaved, resumable runs of every method on one target, and their report.

    from specdec.bench import run_bench, write_report
    run_bench(None, "mtbench", limit=10, out_dir="bench")  # the default: the best method, vanilla, HF generate, T=0
    run_bench(["vanilla", "hf-generate", "ngram"], "mtbench", [0.0, 1.0], 128, limit=10, out_dir="bench")
    write_report("bench")  # bench/results.md and the PNG plots

Before its first generation a run prints how many generations it owes and a measured estimate of their time
(:mod:`specdec.bench.plan`). The command line is ``specdec bench`` (see :mod:`specdec.cli`).
"""

from specdec.bench.output import write_report
from specdec.bench.plan import DEFAULT_TEMPERATURES, default_methods
from specdec.bench.report import aggregate, load_rows
from specdec.bench.runner import HF_METHODS, hardware_info, run_bench

__all__ = [
    "DEFAULT_TEMPERATURES",
    "HF_METHODS",
    "aggregate",
    "default_methods",
    "hardware_info",
    "load_rows",
    "run_bench",
    "write_report",
]
