"""Sampled trees shaped each cycle by measured acceptance per draw rank (Sequoia's positional acceptance) and cost.

At T > 0 a sampled tree's node of rank path ``(i_1, …, i_d)`` is the ``i_l``-th draw without replacement under each
ancestor. Multi-round verification tries a node's children in draw order until one is accepted, so each try of a
child of rank ``k`` happens with its parent accepted and its ``k`` earlier siblings rejected. This policy keeps, per
rank ``k`` and per level group (the root's children, or deeper), the measured probability of acceptance at such a try,
``r[k]`` (decayed counts of tries and acceptances, read off each cycle's accepted path). Under the assumption that a
try depends only on its group and rank (the positional acceptance vector of Sequoia, Chen et al. 2024), a node's
probability of lying on the accepted path is

    v(i_1 … i_d) = prod_l [ prod_{j < i_l} (1 - r[j]) ] r[i_l]

and a tree of ``n`` draft nodes emits ``1 + sum v`` tokens per cycle on average. Per cycle the policy orders the
nodes best first (a node enters after its parent and its next-lower-ranked sibling, so every prefix of the order is a
valid sampled shape: consecutive ranks, prefix-closed), and draws the prefix with the best rate

    (1 + sum of its v) / (cost(n + 1) + depth x drafting seconds per level)

with ``cost`` the target's measured forward-cost curve (:func:`specdec.budget.forward_cost_curve`) and the seconds per
level measured on this policy's own grows (:class:`~specdec.trees.draft_clock.DraftClock`); ``n = 0`` is the
root alone (a vanilla step, no drafting). The menu of :class:`~specdec.trees.menu.SampledMenuPolicy` chooses among a
few fixed shapes up to ``r3d``; this policy grows past it wherever the forward stays cheap and acceptance by rank
says the extra draws pay.

Exploration: a rank never tried keeps an optimistic prior (:attr:`RankedSampledPolicy.PRIOR`), so it is drawn until
measured; the largest tree is drawn for the first :attr:`~RankedSampledPolicy.WARM_UP` cycles and then at least every
:attr:`~RankedSampledPolicy.EXPLORE_EVERY` cycles, so that every rank's estimate stays fresh.

Exactness (the contract the verifier relies on): each cycle's tree is a stochastic shape grown by
:class:`~specdec.trees.stochastic.StochasticTreePolicy` and verified exactly for that shape; the shape is a function of
earlier cycles only (accepted paths and timings), never of this cycle's draws or of the sampler's generator. Every
shape has at most ``max_width`` children per node and ``max_depth`` levels, which :meth:`kind` reports, so the verifier
chosen once per call serves every cycle. Timings make the shapes machine-dependent: a seed fixes the distribution, not
the exact sample (pass ``draft_seconds`` for shapes that depend on accepted paths only).
"""

from __future__ import annotations

import heapq

import torch

from specdec.budget import CostCurve
from specdec.interfaces import Drafter, TreeKind, TreePolicy
from specdec.sampling import SamplingParams
from specdec.tree import DraftTree
from specdec.trees.draft_clock import DraftClock
from specdec.trees.stochastic import StochasticTreePolicy

__all__ = ["RankedSampledPolicy"]

RankPath = tuple[int, ...]  # child ranks from the root down


class RankedSampledPolicy(TreePolicy):
    """Per cycle, the best-rate sampled tree from measured acceptance by draw rank (module docstring).

    Args:
        curve: the target's forward-cost curve (seconds per tree size, root included).
        max_nodes: the largest tree, root included (the drafters' buffers are sized by it).
        max_depth: levels below the root at most.
        max_width: children per node at most.
        draft_seconds: fixed seconds per drafted level instead of measured ones.
        smoothing: weight of the newest observation in the decayed counts (the drafting time: :class:`DraftClock`).
        draft_temperature_ratio: draws at ``ratio x T`` (:class:`~specdec.trees.stochastic.StochasticTreePolicy`).

    Attributes:
        last_paths: the rank paths of the last tree grown (node id ``k >= 1`` is ``last_paths[k - 1]``; None before the
            first, ``()`` for a root-only cycle).
    """

    #: The acceptance a rank is credited with before it is tried (optimistic: untried ranks get drawn and measured).
    PRIOR = 0.5
    #: Cycles that draw the largest tree before the policy chooses by rate.
    WARM_UP = 4
    #: After the warm-up, the largest tree is drawn at least once every this many cycles.
    EXPLORE_EVERY = 32

    def __init__(
        self,
        curve: CostCurve,
        max_nodes: int = 16,
        max_depth: int = 4,
        max_width: int = 8,
        draft_seconds: float | None = None,
        smoothing: float = 0.02,
        draft_temperature_ratio: float = 1.0,
    ) -> None:
        if max_nodes < 2 or max_depth < 1 or max_width < 1:
            raise ValueError(
                "a ranked sampled tree needs max_nodes >= 2, max_depth >= 1 and max_width >= 1, got "
                f"{max_nodes}, {max_depth}, {max_width}"
            )
        self.curve, self.draft_seconds, self.smoothing = curve, draft_seconds, smoothing
        self.max_nodes, self.max_depth, self.max_width = max_nodes, max_depth, max_width
        self.draft_temperature_ratio = draft_temperature_ratio
        #: per level group (0: the root's children, 1: deeper) and rank: decayed tries and acceptances
        self.tries = [[1.0] * max_width for _ in range(2)]
        self.hits = [[self.PRIOR] * max_width for _ in range(2)]
        self.clock = DraftClock()  # seconds per drafted level, from this policy's own clean grows
        self.cycle = 0
        self.last_paths: tuple[RankPath, ...] | None = None
        self._largest_at = -1
        self._warm = 0
        self._trees: dict[tuple[RankPath, ...], StochasticTreePolicy] = {}
        widest = [(k,) for k in range(min(max_width, max_nodes - 1))]
        self._largest = StochasticTreePolicy(widest, draft_temperature_ratio)  # T = 0's tree; checks the ratio now

    def kind(self, sampling: SamplingParams) -> TreeKind:
        """Sampled candidates at T > 0, at most ``max_width`` children per node (every shape this policy draws)."""
        if sampling.greedy:
            return self._largest.kind(sampling)
        return TreeKind(sampled=True, chain=False, max_children=self.max_width)

    def acceptance(self, depth: int, rank: int) -> float:
        """Estimated probability that a try of a rank-``rank`` child at ``depth`` (1: the root's) is accepted."""
        g = 0 if depth == 1 else 1
        return self.hits[g][rank] / self.tries[g][rank]

    def order(self) -> list[tuple[RankPath, float]]:
        """Up to ``max_nodes - 1`` rank paths best first, each with its probability of being on the accepted path;
        every prefix of the list is a valid sampled shape (a node follows its parent and its lower-ranked sibling)."""
        heap: list[tuple[float, RankPath, float]] = []  # (-value, path, mass left to its next sibling)

        def push(path: RankPath, reach: float) -> None:  # reach: P(tried) = parent's value x earlier siblings missed
            r = self.acceptance(len(path), path[-1])
            heapq.heappush(heap, (-reach * r, path, reach * (1.0 - r)))

        push((0,), 1.0)
        out: list[tuple[RankPath, float]] = []
        while heap and len(out) < self.max_nodes - 1:
            neg, path, left = heapq.heappop(heap)
            out.append((path, -neg))
            if path[-1] + 1 < self.max_width:
                push(path[:-1] + (path[-1] + 1,), left)
            if len(path) < self.max_depth:
                push(path + (0,), -neg)
        return out

    def choose(self) -> tuple[RankPath, ...]:
        """This cycle's rank paths (``()``: the root alone), a function of earlier cycles only; records the choice."""
        ordered = self.order()
        self.cycle += 1
        if self._warm < self.WARM_UP or self.cycle - 1 - self._largest_at >= self.EXPLORE_EVERY:
            self._largest_at, self._warm = self.cycle - 1, self._warm + 1
            return tuple(p for p, _ in ordered)
        level = self.draft_seconds if self.draft_seconds is not None else (self.clock.seconds or 0.0)
        best, best_rate = 0, 1.0 / self.curve.cost(1)
        tokens, depth = 1.0, 0
        for n, (path, value) in enumerate(ordered, start=1):
            tokens, depth = tokens + value, max(depth, len(path))
            rate = tokens / (self.curve.cost(n + 1) + depth * level)
            if rate > best_rate:
                best, best_rate = n, rate
        return tuple(p for p, _ in ordered[:best])

    def _tree(self, paths: tuple[RankPath, ...]) -> StochasticTreePolicy:
        key = tuple(sorted(paths, key=lambda p: (len(p), p)))
        tree = self._trees.get(key)
        if tree is None:
            if len(self._trees) >= 256:  # shapes settle on a few; a drifting estimate must not grow this forever
                self._trees.clear()
            tree = self._trees[key] = StochasticTreePolicy(key, self.draft_temperature_ratio)
        return tree

    def grow(
        self,
        drafter: Drafter,
        root: torch.Tensor,
        sampling: SamplingParams,
        generator: torch.Generator | None,
        avoid: torch.Tensor | None = None,
    ) -> DraftTree:
        """Grow this cycle's shape under ``root`` (T = 0: the widest root's deterministic tree); ``avoid``: target ids
        the root's draws skip (:meth:`specdec.trees.stochastic.StochasticTreePolicy.grow`)."""
        if sampling.greedy:
            return self._largest.grow(drafter, root, sampling, generator)
        paths = self.choose()
        if not paths:
            self.last_paths = ()
            self.clock.skipped()
            return DraftTree.single(root, drafter.vocab_size)
        tree = self._tree(paths)
        self.last_paths = tree.shape.paths
        started = self.clock.start(root.device)
        out = tree.grow(drafter, root, sampling, generator, avoid=avoid)
        self.clock.record(drafter, started, tree.max_depth)
        return out

    def observe_path(self, accepted: list[int]) -> None:
        """Fold this cycle's tries into the estimates: under every accepted node, its children in draw order up to the
        accepted one (the ones before it rejected), or all of them rejected under the path's last node."""
        paths = self.last_paths
        if not paths:
            return
        on_path = {paths[k - 1] for k in accepted[1:] if 0 < k <= len(paths)}
        present = set(paths)
        keep = 1.0 - self.smoothing
        for node in [(), *on_path]:
            g, rank = (0 if not node else 1), 0
            while node + (rank,) in present:
                hit = node + (rank,) in on_path
                self.tries[g][rank] = keep * self.tries[g][rank] + 1.0
                self.hits[g][rank] = keep * self.hits[g][rank] + hit
                if hit:
                    break
                rank += 1

    def resized(self, total: int) -> StochasticTreePolicy | None:
        """Depth-1 trees of ``total`` nodes (``total - 1`` root draws), as the stochastic policy's; None past
        ``max_width`` root draws or ``max_nodes`` nodes (the drafters' buffers)."""
        if not 2 <= total <= 1 + min(self.max_width, self.max_nodes - 1):
            return None
        return self._tree(tuple((r,) for r in range(total - 1)))

    def __repr__(self) -> str:
        return (
            f"RankedSampledPolicy(max_nodes={self.max_nodes}, max_depth={self.max_depth}, max_width={self.max_width})"
        )
