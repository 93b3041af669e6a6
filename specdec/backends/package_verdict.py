"""Whole packages timed against each other: which kernels a package's linears run, decided by the package.

Why: :func:`~specdec.backends.skinny_choice.package_kernels` puts a linear on the skinny kernel where its shape alone
measured faster than torch's own GEMM over cold weights. Inside an ahead-of-time package the rival is not that GEMM
but the one inductor tunes into the package, and the shapes' verdicts did not carry over: on the AMD Zen 4 (family 25
model 17, 2026-11-30, ``docs/results/2026-11-30-package-amd-f25m17``) all 211 of SmolLM2's linears "won" by shape,
and the package built so ran a 1-token step in 32-33 ms against the stock package's 22-23 ms (faster only from 8
rows: 43-44 against 48-54 ms). As with the row padding (:mod:`~specdec.backends.row_padding`), what decides is the
whole forward.

What: where ``weights="auto"`` would put linears of a package on the kernel and a package may be built
(``static_shapes="aot"``), :func:`specdec.package_timing.settle` builds both that package and the stock one
(inductor's GEMMs for every linear), times each one's forward of ``1`` and ``8`` rows after a prompt (the two
packages alternating), and records the verdict for the pair (:func:`record`, :func:`recorded`: cached beside the
kernel tables; ``specdec doctor`` prints it): the kernel's package stays where its ``T(1) + T(8)`` beats the stock
package's by more than :data:`~specdec.backends.kernel_times.TIE`, else every linear goes back to stock. The losing
package's file is deleted (each holds its own copy of the weights: 0.6 GiB for SmolLM2). Once per machine and model:
building both costs about 4 minutes for SmolLM2 on 2 cores instead of 1-3 for one. ``static_shapes="auto"`` never
builds and so never measures: it follows a recorded verdict, else the shapes' choice where its package is cached.
To measure again, delete the verdicts' file (:func:`verdict_path`; ``specdec doctor`` prints the verdicts). Two
processes settling the same model at once may each record a verdict (the last one written stays).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from torch import nn

from specdec.backends.aot import package_path
from specdec.backends.kernel_times import table_path

__all__ = ["record", "recorded", "verdict_path", "verdict_text"]

#: The verdicts' name in the table's key (its file sits beside the kernel tables).
CANDIDATES = ("package-verdict",)


def verdict_path() -> Path:
    """The machine's table of verdicts (one file per machine key, as the kernel tables)."""
    return table_path(torch.float32, CANDIDATES)


def recorded(model: nn.Module) -> dict | None:
    """The verdict recorded for ``model``'s package (``model`` with its linears on the kernel as the shapes chose:
    the key is that package's name), or None. ``{"choice": "skinny" | "stock", "ms": {"skinny": {rows: ms}, "stock":
    {rows: ms}}, "failed": [...]}``: a package that could not be built has no times and is named in ``failed``."""
    path = verdict_path()
    table = json.loads(path.read_text()) if path.exists() else {}
    return table.get(package_path(model).name) if table else None  # no table: the weights are not hashed


def record(model: nn.Module, verdict: dict) -> None:
    """Record ``verdict`` for ``model``'s package (``model`` with its linears on the kernel as the shapes chose)."""
    path = verdict_path()
    table = json.loads(path.read_text()) if path.exists() else {}
    table[package_path(model).name] = verdict
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")  # another process may read the table meanwhile
    tmp.write_text(json.dumps(table, indent=1, sort_keys=True))
    tmp.replace(path)


def verdict_text(verdict: dict) -> str:
    """A verdict in words: each package's times, any that could not be built, which is kept."""
    ms, failed = verdict["ms"], verdict.get("failed", [])
    times = ", ".join(f"{name} {' / '.join(f'{t:.1f}' for t in per.values())} ms" for name, per in ms.items())
    rows = " / ".join(next(iter(ms.values()))) if ms else ""
    text = f"the whole packages timed here ({rows} rows): {times}" if ms else "no package timed"
    return text + (f"; could not be built: {', '.join(failed)}" if failed else "") + f"; {verdict['choice']} kept"
