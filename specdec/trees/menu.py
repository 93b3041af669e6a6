"""Sampled trees sized by measured costs: each cycle draws the shape of a small menu with the best rate.

At T > 0 the methods draw a fixed sampled shape (``r3d``: three root children, two of them with one child each).
That pays where a forward of six tokens costs about one of one token (AMD with packed weights). Where verification
is dear it does not: on an Intel Xeon, EAGLE-3 with ``r3d`` at T = 1 ran at 0.92x vanilla. The adaptive tree at
T = 0 already sizes each tree from the target's cost curve; :class:`SampledMenuPolicy` does the same for sampled
trees:

* a menu of nested shapes, smallest first; by default no draft at all (a root-only tree: a vanilla step), one
  sampled token, and ``r3d`` (:data:`DEFAULT_MENU`);
* per node of the largest shape (a rank path), an estimate of the probability that the verifier accepts it: decayed
  counts of the cycles whose tree held the node and of those that accepted it (the loop hands the accepted node ids
  to :meth:`~specdec.interfaces.TreePolicy.observe_path`). Under multi-round verification a node's acceptance
  depends only on its ancestors and its lower-ranked siblings, which every shape holding it holds too, so one
  estimate serves every shape, and a shape's expected tokens per cycle are ``1 +`` the sum over its nodes;
* per cycle the shape with the best rate ``E[tokens] / (cost(nodes) + levels x drafting time per level)``, with
  ``cost`` the target's measured forward-cost curve (:func:`specdec.budget.forward_cost_curve`) and the drafting
  time per level a moving average of this policy's own grows (:class:`~specdec.trees.draft_clock.DraftClock`: the
  first grow of a generation and the first after a root-only cycle are left out, their root step runs more);
* the largest shape is drawn :attr:`SampledMenuPolicy.WARM_UP` times before any choice, and then every
  :attr:`SampledMenuPolicy.EXPLORE_EVERY` cycles if it is not the choice anyway, so that every node's estimate
  stays fresh.

Exactness: each cycle's tree is one of the menu's stochastic shapes (or the root alone), grown by
:class:`~specdec.trees.stochastic.StochasticTreePolicy` and verified exactly for its own shape. The choice of shape
depends only on earlier cycles (accepted lengths and timings), never on this cycle's draws or on the sampler's
generator, so it cannot bias this cycle's output. The timings make the choice machine-dependent, so at T > 0 a seed
fixes the distribution but not the exact sample (as with the adaptive tree); pass ``draft_seconds`` for runs whose
shapes depend on the accepted lengths only.

The verifier is chosen once per call for the menu's largest shape (its :meth:`kind`); every smaller shape of the
menu has no more children per node, so the same verifier serves it. A root-only tree runs no draft step; the
drafter catches up on the skipped tokens at its next expand (its commits are lazy).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specdec.budget import CostCurve
from specdec.interfaces import Drafter, TreeKind, TreePolicy
from specdec.sampling import SamplingParams
from specdec.tree import DraftTree
from specdec.trees.draft_clock import DraftClock
from specdec.trees.stochastic import StochasticTreePolicy

__all__ = ["DEFAULT_MENU", "SampledMenuPolicy"]

#: The default menu (rank paths; ``()`` is the root alone): the root alone, one sampled token, ``r3d``. Shapes of
#: 3 nodes (a chain of two, two root children) were left out: on a flat cost curve their rate came within a few per
#: cent of ``r3d``'s, and the noise of the estimates then drew them for two cycles in three, which measured 6 %
#: slower than ``r3d`` alone (AMD Zen 4, packed weights, T = 1; the 2026-11-27 sampled-menu results entry).
DEFAULT_MENU: tuple[tuple[tuple[int, ...], ...], ...] = (
    (),
    ((0,),),
    ((0,), (1,), (2,), (0, 0), (1, 0)),
)


class SampledMenuPolicy(TreePolicy):
    """Per cycle, the sampled shape of ``menu`` with the best measured rate (module docstring).

    Args:
        curve: the target's forward-cost curve (seconds per tree size, root included).
        menu: rank-path shapes (``()``: the root alone), each a valid
            :class:`~specdec.trees.stochastic.StochasticTreePolicy` shape; the last must contain every other (its
            kind sets the verifier, and its draws keep every node's estimate fresh).
        draft_seconds: fixed seconds per drafted level instead of measured ones (runs whose choices depend on the
            accepted paths only).
        smoothing: weight of the newest cycle in the decayed counts (the drafting time: :class:`DraftClock`).
        draft_temperature_ratio: the shapes' draws are at ``ratio x T``
            (:class:`~specdec.trees.stochastic.StochasticTreePolicy`).

    Attributes:
        last_shape: index into the menu of the last tree grown (None before the first).
    """

    #: Draws of the largest shape before the policy chooses by rate.
    WARM_UP = 4
    #: After the warm-up, the largest shape is drawn at least once every this many cycles.
    EXPLORE_EVERY = 32

    def __init__(
        self,
        curve: CostCurve,
        menu: Sequence[Sequence[Sequence[int]]] = DEFAULT_MENU,
        draft_seconds: float | None = None,
        smoothing: float = 0.05,
        draft_temperature_ratio: float = 1.0,
    ) -> None:
        if not menu:
            raise ValueError("a sampled menu needs at least one shape")
        self.shapes = [tuple(tuple(p) for p in shape) for shape in menu]
        largest = set(self.shapes[-1])
        for shape in self.shapes:
            if not set(shape) <= largest:
                raise ValueError(f"menu shape {shape} is not part of the last, largest shape {self.shapes[-1]}")
        self.trees = [StochasticTreePolicy(shape, draft_temperature_ratio) if shape else None for shape in self.shapes]
        self.curve, self.draft_seconds, self.smoothing = curve, draft_seconds, smoothing
        last = self.trees[-1]
        self.max_nodes = last.max_nodes if last is not None else 1
        self.max_depth = last.max_depth if last is not None else 0
        #: per rank path: decayed counts of cycles that held the node and that accepted it
        self.held = dict.fromkeys(largest, 0.0)
        self.hits = dict.fromkeys(largest, 0.0)
        self.clock = DraftClock()  # seconds per drafted level, from this policy's own clean grows
        self.cycle = 0
        self.last_shape: int | None = None
        self._largest_at = -1  # the cycle that last drew the largest shape
        self._warm = 0

    def kind(self, sampling: SamplingParams) -> TreeKind:
        """The largest shape's kind (every shape of the menu is served by its verifier)."""
        last = self.trees[-1]
        return last.kind(sampling) if last is not None else TreeKind(sampled=True, chain=True, max_children=1)

    def acceptance(self, path: tuple[int, ...]) -> float:
        """Estimated probability that the verifier accepts the node at rank path ``path`` (0 before any data)."""
        held = self.held[path]
        return self.hits[path] / held if held > 0 else 0.0

    def rate(self, index: int) -> float:
        """Expected tokens per second of menu shape ``index``."""
        tree = self.trees[index]
        if tree is None:
            return 1.0 / self.curve.cost(1)
        tokens = 1.0 + sum(self.acceptance(p) for p in self.shapes[index])
        level = self.draft_seconds if self.draft_seconds is not None else (self.clock.seconds or 0.0)
        return tokens / (self.curve.cost(tree.max_nodes) + tree.max_depth * level)

    def choose(self) -> int:
        """The menu index this cycle draws (a function of earlier cycles only)."""
        largest = len(self.shapes) - 1
        if self._warm < self.WARM_UP or self.cycle - self._largest_at >= self.EXPLORE_EVERY:
            return largest
        return max(range(len(self.shapes)), key=lambda i: (self.rate(i), i))

    def next_shape(self) -> int:
        """Choose this cycle's shape (:meth:`choose`) and record the choice; :meth:`grow` calls it."""
        index = self.choose()
        self.last_shape = index
        if index == len(self.shapes) - 1:
            self._largest_at, self._warm = self.cycle, self._warm + 1
        self.cycle += 1
        return index

    def grow(
        self,
        drafter: Drafter,
        root: torch.Tensor,
        sampling: SamplingParams,
        generator: torch.Generator | None,
        avoid: torch.Tensor | None = None,
    ) -> DraftTree:
        """Grow the chosen shape under ``root`` (T = 0: the largest shape's deterministic tree, as
        :class:`~specdec.trees.stochastic.StochasticTreePolicy` does); ``avoid``: target ids the root's draws skip
        (:meth:`StochasticTreePolicy.grow <specdec.trees.stochastic.StochasticTreePolicy.grow>`)."""
        if sampling.greedy:
            last = self.trees[-1]
            return last.grow(drafter, root, sampling, generator) if last is not None else DraftTree.single(root)
        index = self.next_shape()
        tree = self.trees[index]
        if tree is None:
            self.clock.skipped()
            return DraftTree.single(root, drafter.vocab_size)
        started = self.clock.start(root.device)
        out = tree.grow(drafter, root, sampling, generator, avoid=avoid)
        self.clock.record(drafter, started, tree.max_depth)
        return out

    def observe_path(self, accepted: list[int]) -> None:
        """Fold this cycle's accepted path (node ids, root first) into the estimates of the nodes its tree held."""
        index = self.last_shape
        if index is None or self.trees[index] is None:
            return
        paths = self.trees[index].shape.paths  # node id k >= 1 is paths[k - 1]
        on_path = {paths[k - 1] for k in accepted[1:] if 0 < k <= len(paths)}
        keep = 1.0 - self.smoothing
        for path in paths:
            self.held[path] = keep * self.held[path] + 1.0
            self.hits[path] = keep * self.hits[path] + (path in on_path)

    def __repr__(self) -> str:
        return f"SampledMenuPolicy(shapes={len(self.shapes)}, max_nodes={self.max_nodes})"
