"""Timing whole ahead-of-time packages against each other (:mod:`specdec.backends.package_verdict` says why and
records the verdicts): called by :class:`~specdec.target.HFTarget` before it prepares a model for
``static_shapes="aot"``."""

from __future__ import annotations

import statistics
import time

import torch
from torch import nn

from specdec.attention import AttentionLayout
from specdec.backends import prepare_model
from specdec.backends.aot import package_path
from specdec.backends.kernel_times import TIE
from specdec.backends.package_verdict import record, recorded
from specdec.runner import ModelRunner

__all__ = ["PROMPT", "REPEATS", "ROWS", "settle"]

#: Row counts each package's forward is timed at (a 1-token step, a tree), after a prompt of ``PROMPT`` tokens.
ROWS = (1, 8)
PROMPT = 64
#: Timed forwards per package and row count (the median kept), after one untimed forward of each.
REPEATS = 7


def settle(model: nn.Module) -> dict | None:
    """Measure and record the verdict for ``model`` (a float32 CPU model as its caller gave it, not prepared) where
    ``weights="auto"`` with ``static_shapes="aot"`` would put linears on the kernel and no verdict is recorded; returns
    the new verdict, or None where there is nothing to measure (no linear on the kernel: none chosen by shape, or a
    recorded verdict for stock put them back; a recorded verdict for the kernel; neither package could be built).
    Builds the packages that are missing; leaves ``model`` as it was (both variants are shared copies).

    A package that cannot be built (the runner warns and runs the static forward eagerly) loses without being timed:
    where the kernel's cannot, stock is recorded (``"failed": ["skinny"]``), and the other way round; where neither
    can, nothing is recorded (each process then tries again, as the runner would)."""
    skinny, execution = prepare_model(model, "auto", "aot", warn=False)
    if not execution.skinny or recorded(skinny) is not None:
        return None
    stock, _ = prepare_model(model, "stock", "aot", warn=False)
    ms, failed = _time({"skinny": skinny, "stock": stock})
    if len(failed) == 2:
        return None
    timed = {name: sum(per.values()) for name, per in ms.items()}
    wins = failed == ["stock"] or (not failed and timed["skinny"] < (1 - TIE) * timed["stock"])
    verdict = {"choice": "skinny" if wins else "stock", "ms": ms, "failed": failed}
    record(skinny, verdict)
    loser = package_path(stock if wins else skinny)
    loser.unlink(missing_ok=True)
    loser.with_suffix(".json").unlink(missing_ok=True)
    return verdict


def _time(models: dict[str, nn.Module]) -> tuple[dict[str, dict[str, float]], list[str]]:
    """``(ms, failed)``: median ms of each prepared model's package forward per row count in :data:`ROWS` (building
    a missing package at its first forward, untimed), the models alternating; ``failed`` names the models whose
    package could not serve them (the runner fell back to the eager static forward, with its warning), whose times
    are left out of ``ms`` (they would not be the package's)."""
    runners = {
        name: ModelRunner(m, AttentionLayout.of(m, warn=False), PROMPT + max(ROWS), static=True, aot=True)
        for name, m in models.items()
    }
    vocab = next(iter(models.values())).get_input_embeddings().num_embeddings
    ids = torch.arange(PROMPT + max(ROWS)) % vocab
    positions = torch.arange(PROMPT + max(ROWS))
    times: dict[str, dict[int, list[float]]] = {name: {n: [] for n in ROWS} for name in runners}
    for runner in runners.values():
        runner.forward(ids[:PROMPT], positions[:PROMPT], 0)  # the prompt (eager: fills the cache)
    for repeat in range(REPEATS + 1):
        for n in ROWS:
            for name, runner in runners.items():
                if repeat and not runner.compiled:
                    continue
                start = time.perf_counter()
                runner.forward(ids[PROMPT : PROMPT + n], positions[PROMPT : PROMPT + n], PROMPT)
                if repeat:  # the first of each: the package's load (or build)
                    times[name][n].append(time.perf_counter() - start)
    failed = [name for name, runner in runners.items() if not runner.compiled]
    kept = {name: per for name, per in times.items() if name not in failed}
    return {name: {str(n): statistics.median(v) * 1e3 for n, v in per.items()} for name, per in kept.items()}, failed
