"""Seconds per drafted level, as a tree policy that prices its own draws measures them on its own grows.

A policy that chooses its tree's size by rate (:class:`~specdec.trees.menu.SampledMenuPolicy`,
:class:`~specdec.trees.ranked.RankedSampledPolicy`) charges each drafted level this time. Two kinds of grow do more
than draft their tree. The first of a generation (of a drafter object) also runs the prompt through the head, many
times a level's cost: it is left out. The first after root-only cycles also runs the skipped tokens: it may only
lower the average. Counted, the first of a generation priced every level too high for many cycles, so the policy
drew the root alone where its trees paid; and leaving every grow after a root-only cycle out froze that price, since
the policy's exploring grows then all came after root-only cycles (the 2026-11-30 ranked-trees results entry). In
the batched loop the rows' root steps run together before the grows (one head forward), so there a grow times its
later levels only and the average is low by up to one level in ``levels``.
"""

from __future__ import annotations

import time

from specdec.interfaces import Drafter

__all__ = ["DraftClock"]


class DraftClock:
    """A moving average of seconds per drafted level over a policy's clean grows (module docstring).

    Args:
        smoothing: the newest clean grow's weight in the average.

    Attributes:
        seconds: the average (None before the first clean grow).
    """

    def __init__(self, smoothing: float = 0.2) -> None:
        self.smoothing = smoothing
        self.seconds: float | None = None
        self._generation: tuple[int, int] | None = None  # (drafter object, its generation) of the last grow
        self._after_skip = False  # root-only cycles since the last grow: its root step runs the skipped tokens

    def start(self) -> float:
        """The time a grow starts (pass it to :meth:`record`)."""
        return time.perf_counter()

    def skipped(self) -> None:
        """A root-only cycle: the next grow's root step also runs its token."""
        self._after_skip = True

    def record(self, drafter: Drafter, started: float, levels: int) -> None:
        """Fold a grow of ``levels`` levels that began at ``started`` into the average: not the first of ``drafter``'s
        generation; right after root-only cycles (:meth:`skipped`), only where it is faster than the average."""
        generation = (id(drafter), drafter.generation)
        first = generation != self._generation
        after_skip, self._generation, self._after_skip = self._after_skip, generation, False
        if first or levels < 1:
            return
        per_level = (time.perf_counter() - started) / levels
        previous = self.seconds
        if after_skip and (previous is None or per_level >= previous):
            return
        self.seconds = per_level if previous is None else previous + self.smoothing * (per_level - previous)
