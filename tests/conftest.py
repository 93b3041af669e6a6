"""Suite-wide settings.

``SPECDEC_CPU_GEMM=onednn``: on every host the suites run the fully packed fast path (every linear oneDNN-packed),
the most transformed form of a model. ``"auto"`` on an Intel CPU with MKL packs only vocabulary projections, a
mix of packed and stock linears that these suites cover from both sides; the choice itself is tested in
``tests/test_fastpath.py`` under both profiles. ``SPECDEC_TUNE_GEMMS=0``: compiled CPU graphs skip inductor's GEMM
autotuning. ``SPECDEC_PACKAGES=off``: ``static_shapes="auto"`` does not pick up ahead-of-time packages cached on the
machine. ``SPECDEC_SKINNY=off``: ``weights="auto"`` leaves the skinny kernel out. ``SPECDEC_ROW_PADDING=off``: it pads
no rows in the packed linears. A value already set in the environment wins.
"""

from __future__ import annotations

import os

os.environ.setdefault("SPECDEC_CPU_GEMM", "onednn")
# compiled CPU graphs freeze their weights without inductor's GEMM autotuning (minutes per tiny graph set); the
# tuned form runs in tests/test_compiled.py's heavy test
os.environ.setdefault("SPECDEC_TUNE_GEMMS", "0")
# static_shapes="auto" ignores ahead-of-time packages this machine may have cached (a fresh clone has none);
# tests/test_aot.py turns them back on in a cache of its own
os.environ.setdefault("SPECDEC_PACKAGES", "off")
# weights="auto" never builds or measures the skinny kernel (a minute's build per cache); tests/test_skinny_choice.py
# turns it back on
os.environ.setdefault("SPECDEC_SKINNY", "off")
# weights="auto" pads no rows in the packed linears (each SmolLM2 target would time its padded steps once per cache);
# tests/test_row_padding.py turns it back on
os.environ.setdefault("SPECDEC_ROW_PADDING", "off")


def pytest_sessionstart(session) -> None:
    """The CPU first (its model and the flags that pick the kernels): which tests skip, and why, depends on it."""
    from specdec.backends.cpu import machine_summary

    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(machine_summary())
