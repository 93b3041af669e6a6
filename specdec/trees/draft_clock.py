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

On a device that runs ahead of the host (CUDA) the host's clock around a grow reads its kernel launches, not its
work, unless the grow reads a value back. :class:`GrowTimer` times such grows right at a small price: a grow is timed
with the device waited for at its start and its end (two host syncs) when a reading is due, and the next is due
:data:`TIMED_EVERY` grows after a reading was used (a reading its user leaves out, such as a generation's first grow,
leaves the next grow due); the others are not timed. The first grow of a timer is never timed there (it also runs
the prompt). On a CPU, and for a grow that reads a value back at its end, every grow is timed, with no wait.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import torch

from specdec.interfaces import Drafter

__all__ = ["TIMED_EVERY", "DraftClock", "GrowTimer", "device_sync"]

#: On a device that runs ahead of the host, grows between a used reading and the next due one (:class:`GrowTimer`).
TIMED_EVERY = 16


def device_sync(device: torch.device) -> Callable[[], None] | None:
    """A call that waits for the work queued on ``device``, or None where the host never runs ahead (a CPU)."""
    if device.type == "cuda":
        return functools.partial(torch.cuda.synchronize, device)
    return None


class GrowTimer:
    """Wall seconds of a grow, right on any device (module docstring): :meth:`start` returns the start time, or None
    for a grow left untimed (on CUDA, all but the due ones); :meth:`stop` the seconds, or None; :meth:`used` says a
    reading was folded in."""

    def __init__(self) -> None:
        self.grows = 0
        self._due = 2  # the grow count at which a reading is next due on a device that runs ahead
        self._sync: Callable[[], None] | None = None  # the timed grow's device wait

    def start(self, device: torch.device | None = None, synced: bool = False) -> float | None:
        """A grow on ``device`` (None: the host's) starts; ``synced``: it reads a value back at its end, so its clock
        is right without a wait. Where the device runs ahead, a due grow waits for it here."""
        self.grows += 1
        sync = None if device is None or synced else device_sync(device)
        self._sync = None
        if sync is None:
            return time.perf_counter()
        if self.grows < self._due:
            return None
        self._sync = sync
        sync()
        return time.perf_counter()

    def stop(self, started: float | None) -> float | None:
        """The seconds since ``started`` (the device's work included), or None for an untimed grow."""
        if started is None:
            return None
        if self._sync is not None:
            self._sync()
        return time.perf_counter() - started

    def used(self) -> None:
        """The latest reading was folded in: where the device runs ahead, the next is due :data:`TIMED_EVERY` on."""
        self._due = self.grows + TIMED_EVERY


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
        self._timer = GrowTimer()

    def start(self, device: torch.device | None = None) -> float | None:
        """The time a grow on ``device`` starts, None where it goes untimed (pass it to :meth:`record`;
        :class:`GrowTimer`)."""
        return self._timer.start(device)

    def skipped(self) -> None:
        """A root-only cycle: the next grow's root step also runs its token."""
        self._after_skip = True

    def record(self, drafter: Drafter, started: float | None, levels: int) -> None:
        """Fold a grow of ``levels`` levels that began at ``started`` into the average: not the first of ``drafter``'s
        generation; right after root-only cycles (:meth:`skipped`), only where it is faster than the average; not
        an untimed one (``started`` None)."""
        generation = (id(drafter), drafter.generation)
        first = generation != self._generation
        after_skip, self._generation, self._after_skip = self._after_skip, generation, False
        seconds = self._timer.stop(started)
        if first or levels < 1 or seconds is None:
            return
        per_level = seconds / levels
        previous = self.seconds
        if after_skip and (previous is None or per_level >= previous):
            return
        self.seconds = per_level if previous is None else previous + self.smoothing * (per_level - previous)
        self._timer.used()
