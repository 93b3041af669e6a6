"""Benchmark harness: interleaved, resumable runs of every method on one target, and their report.

    from specdec.bench import run_bench, write_report
    run_bench(["vanilla", "hf-generate", "ngram"], "mtbench", [0.0], 128, limit=10, out_dir="bench")
    write_report("bench")  # bench/results.md and the PNG plots

The command line is ``specdec bench`` (see :mod:`specdec.cli`).
"""

from specdec.bench.report import aggregate, load_rows, write_report
from specdec.bench.runner import HF_METHODS, hardware_info, run_bench

__all__ = ["HF_METHODS", "aggregate", "hardware_info", "load_rows", "run_bench", "write_report"]
