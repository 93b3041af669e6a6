"""Timing one target's tree forwards for the cost curve (:func:`specdec.budget.measure_forward_cost`): the probe
itself, and how its tries are judged (a dip that moves between tries is a busy machine; one every try repeats is the
machine's own)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

import torch

from specdec.target import HFTarget
from specdec.tree import DraftTree

__all__ = ["DIP_TOLERANCE", "PROBE_ATTEMPTS", "agree", "first_dip", "flat_tree", "probe", "sync"]


def flat_tree(m: int, device: torch.device, generator: torch.Generator, vocab: int) -> DraftTree:
    tokens = torch.randint(0, vocab, (m,), generator=generator).to(device)
    parents = torch.zeros(m, dtype=torch.long, device=device)
    parents[0] = -1
    return DraftTree.from_parents(tokens, parents, 1 if m > 1 else 0)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


#: Tries of the probe before a curve whose times dip with more tokens is kept (flattened, marked ``noisy``).
PROBE_ATTEMPTS = 3
#: A dip larger than this fraction (a bigger tree timed faster than a smaller one) marks a probe as noisy. Small
#: trees of a small model cost the same within a few per cent (a flat curve jitters), so only a clear dip counts.
DIP_TOLERANCE = 0.10


def probe(target: HFTarget, sizes: list[int], trees: dict[int, DraftTree], repeats: int) -> list[float]:
    """Median seconds of ``target.forward_tree`` per size: ``repeats`` rounds after a warm-up round, the sizes
    interleaved within each round so that a slow patch of a shared machine hits every size alike."""
    device = target.device
    times: dict[int, list[float]] = {m: [] for m in sizes}
    for round_ in range(repeats + 1):
        for m in sizes:
            sync(device)
            t0 = time.perf_counter()
            target.forward_tree(trees[m])
            sync(device)
            if round_:  # round 0 warms up every shape
                times[m].append(time.perf_counter() - t0)
    return [statistics.median(times[m]) for m in sizes]


def agree(attempts: Sequence[Sequence[float]]) -> bool:
    """Whether :data:`PROBE_ATTEMPTS` probes agree, every size's times within :data:`DIP_TOLERANCE` of each other: then
    a dip they share is the machine's own (on the 2026-11-30 H200 a 16-token forward took 7.5-7.8 ms and a 24-token
    one 4.7-5.0 ms in all six probes, each after three tries that dipped), not a busy spell, which moves the times
    between tries."""
    if len(attempts) < PROBE_ATTEMPTS:
        return False
    return all(max(times) <= (1.0 + DIP_TOLERANCE) * min(times) for times in zip(*attempts, strict=True))


def first_dip(seconds: Sequence[float]) -> int | None:
    """The first size timed more than :data:`DIP_TOLERANCE` below the largest smaller size's time, or None."""
    for i in range(1, len(seconds)):
        if seconds[i] < (1.0 - DIP_TOLERANCE) * max(seconds[:i]):
            return i
    return None
