"""Benchmark harness: interleaved, resumable runs of every method on one target, and their report.

    from specdec.bench import BenchConfig, run_bench, write_report
    run_bench(BenchConfig(dataset="mtbench", limit=10))  # the best method, vanilla, HF generate, T=0, into bench/
    run_bench(BenchConfig(methods=("vanilla", "hf-generate", "ngram"), temperatures=(0.0, 1.0), limit=10))
    write_report("bench")  # bench/results.md and the PNG plots

A :class:`~specdec.bench.config.BenchConfig` is validated when made (a misspelt field, an unknown method, a value out
of range), before a model loads.

Before its first generation a run prints how many generations it owes and a measured estimate of their time
(:mod:`specdec.bench.plan`). The command line is ``specdec bench`` (see :mod:`specdec.cli`).
"""

from specdec.bench.config import BenchConfig
from specdec.bench.output import write_report
from specdec.bench.plan import DEFAULT_TEMPERATURES, default_methods
from specdec.bench.report import aggregate, load_rows
from specdec.bench.runner import HF_METHODS, hardware_info, run_bench

__all__ = [
    "BenchConfig",
    "DEFAULT_TEMPERATURES",
    "HF_METHODS",
    "aggregate",
    "default_methods",
    "hardware_info",
    "load_rows",
    "run_bench",
    "write_report",
]
