"""Sampled trees that draw a deeper level only where it pays, from this cycle's draws and measured costs.

A sampled shape such as ``r3d`` always drafts its second level, and a forward of six tokens costs more than one of
four (AMD Zen 3: 1.22x against 1.12x a one-token step). EAGLE-2's insight, that the draft's own confidence tells
which nodes will be accepted, holds for draws too: a node drawn with a small path probability rarely has an
accepted child. :class:`LevelGate` decides, before each level after the root's, whether to draw it:

* **gain**: for every node the level would expand, the probability that one of its children is accepted, read
  from a table of decayed counts by the node's path probability ``pi`` (the product of the draft probabilities of
  the draws on its root path, at the draft's temperature), learnt from the accepted paths of earlier cycles;
* **price**: the target's measured cost curve at the tree's size with and without the level, plus the level's
  drafting time (a moving average of this gate's own levels);
* the level is drawn iff ``gain / E > extra seconds / seconds so far``, with ``E`` the tokens a cycle emits (a
  moving average): the rate with the level beats the rate without it.

The first :attr:`LevelGate.WARM_UP` cycles, and then one in :attr:`LevelGate.EXPLORE_EVERY`, draw every level, so
the table keeps learning where the gate would stop.

Contract (losslessness): a level is drawn or not from the draws of the levels before it and the gate's past
(counts, timings), never from the level's own draws or the verifier's coins. Given the history of earlier draws,
every node's children are then draws without replacement from the recorded q, which is all the stochastic
verifiers assume; whether a node has children at all is a function of that history, like a shape chosen before the
cycle (proof in :class:`~specdec.verify.StochasticMultiRoundVerifier`'s rounds, each valid given its history).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

from specdec.budget import CostCurve
from specdec.tree import PartialTree
from specdec.trees.draft_clock import device_sync

__all__ = ["LevelGate"]

#: Path-probability bucket edges of the gain table.
PI_EDGES = (0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.7)


class LevelGate:
    """Per cycle, which levels of a sampled shape after the root's are drawn (module docstring).

    Args:
        curve: the target's forward-cost curve.
        smoothing: weight of the newest observation in the decayed counts and the level time.

    Attributes:
        last_levels: levels drawn in the latest cycle (the root's included).
    """

    WARM_UP = 8
    EXPLORE_EVERY = 16

    def __init__(self, curve: CostCurve, smoothing: float = 0.05) -> None:
        self.curve, self.smoothing = curve, smoothing
        mid = np.sqrt(np.concatenate(([0.005], PI_EDGES)) * np.concatenate((PI_EDGES, [1.0])))
        self.held = np.full(len(PI_EDGES) + 1, 2.0)  # prior: two observations at half the bucket's middle pi
        self.hits = 2.0 * 0.5 * mid
        self.level_seconds: float | None = None
        self.tokens_per_cycle = 1.5
        self.cycle = 0
        self.last_levels = 0
        self._explore = True
        self._mark = 0.0
        self._sync: Callable[[], None] | None = None  # this cycle's device wait (None: a host that never runs ahead)
        self._levels = 0
        self._expanded: list[tuple[int, list[int]]] = []  # (bucket, child ids) of each gated frontier node
        self._pi = np.zeros(0)  # the path probabilities of the frontier :meth:`draws` last decided about

    def gain(self, pi: np.ndarray) -> float:
        """Expected accepted children of frontier nodes of path probabilities ``pi``."""
        b = _buckets(pi)
        return float((self.hits[b] / self.held[b]).sum())

    def start(self, device: torch.device | None = None) -> None:
        """A new cycle's tree begins on ``device`` (its root level is always drawn); where the device runs ahead of
        the host (CUDA), :meth:`level_done` waits for each level's work before reading the clock (the gate reads
        each frontier's values back anyway, :meth:`draws`)."""
        self._sync = None if device is None else device_sync(device)
        self._explore = self.cycle < self.WARM_UP or self.cycle % self.EXPLORE_EVERY == 0
        self.cycle += 1
        self._expanded = []
        self._levels = 0
        self._mark = time.perf_counter()

    def level_done(self, first: bool) -> None:
        """A level was drawn: fold its time into the moving average (the root's level also runs catch-up work)."""
        if self._sync is not None:
            self._sync()
        now = time.perf_counter()
        self._levels += 1
        self.last_levels = self._levels
        if not first:
            s, prev = now - self._mark, self.level_seconds
            self.level_seconds = s if prev is None else prev + self.smoothing * (s - prev)
        self._mark = now

    def draws(self, tree: PartialTree, frontier: torch.Tensor, added: int) -> bool:
        """Whether to draw the level that expands ``frontier`` (``added`` new nodes); a host read of their values,
        kept for :meth:`expanded`."""
        self._pi = np.exp(np.asarray(tree.logq[frontier].double().cpu()))
        return self._explore or self.pays(self._pi, tree.size, added)

    def pays(self, pi: np.ndarray, size: int, added: int) -> bool:
        """Whether ``added`` nodes under a frontier of path probabilities ``pi`` raise a ``size``-node tree's rate."""
        now = self.curve.cost(size) + self._levels * (self.level_seconds or 0.0)
        extra = self.curve.cost(size + added) - self.curve.cost(size) + (self.level_seconds or 0.0)
        return self.gain(pi) / self.tokens_per_cycle > extra / now

    def expanded(self, children: torch.Tensor, rows: torch.Tensor) -> None:
        """Record the level just drawn (the frontier :meth:`draws` said yes to): its nodes' path-probability buckets
        and ``children [M]`` (each of frontier row ``rows [M]``), to learn from."""
        buckets = _buckets(self._pi)
        kids: list[list[int]] = [[] for _ in range(len(buckets))]
        for row, child in zip(rows.tolist(), children.tolist(), strict=True):
            kids[row].append(child)
        self._expanded.extend(zip(buckets.tolist(), kids, strict=True))

    def observe(self, accept_length: int) -> None:
        self.tokens_per_cycle += 0.1 * (accept_length + 1 - self.tokens_per_cycle)

    def observe_path(self, accepted: list[int]) -> None:
        """Count, for every gated frontier node of the latest tree, whether one of its children was accepted."""
        on_path = set(accepted[1:])
        keep = 1.0 - self.smoothing
        for b, kids in self._expanded:
            self.held[b] = keep * self.held[b] + 1.0
            self.hits[b] = keep * self.hits[b] + float(any(k in on_path for k in kids))
        self._expanded = []

    def __repr__(self) -> str:
        return f"LevelGate(warm_up={self.WARM_UP}, explore_every={self.EXPLORE_EVERY})"


def _buckets(pi: np.ndarray) -> np.ndarray:
    """Gain-table rows of path probabilities ``pi``."""
    return np.searchsorted(PI_EDGES, pi, side="right")
