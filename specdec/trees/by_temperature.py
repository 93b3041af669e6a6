"""One policy per kind of call: a deterministic tree at temperature 0, a sampled one above it.

A generator serves any sampling setting per call (:class:`~specdec.generate.SpeculativeGenerator`); the tree that
pays best differs between the two regimes (measured: a dynamic top-k tree at T = 0, a small sampled tree at T = 1,
see the results page). :class:`ByTemperature` holds both and hands the decoding loop the one for each call through
:meth:`~specdec.interfaces.TreePolicy.for_sampling`; it never grows a tree itself.
"""

from __future__ import annotations

import torch

from specdec.interfaces import Drafter, TreeKind, TreePolicy
from specdec.sampling import SamplingParams
from specdec.tree import DraftTree

__all__ = ["ByTemperature"]


class ByTemperature(TreePolicy):
    """``greedy`` at temperature 0, ``sampled`` at temperature > 0.

    Args:
        greedy: the policy for T = 0 calls (e.g. :class:`~specdec.trees.AdaptiveTreePolicy`).
        sampled: the policy for T > 0 calls (e.g. :class:`~specdec.trees.StochasticTreePolicy`).
    """

    def __init__(self, greedy: TreePolicy, sampled: TreePolicy) -> None:
        self.greedy, self.sampled = greedy, sampled
        self.max_nodes = max(greedy.max_nodes, sampled.max_nodes)
        self.max_depth = max(greedy.max_depth, sampled.max_depth)

    def for_sampling(self, sampling: SamplingParams) -> TreePolicy:
        return (self.greedy if sampling.greedy else self.sampled).for_sampling(sampling)

    def kind(self, sampling: SamplingParams) -> TreeKind:
        return self.for_sampling(sampling).kind(sampling)

    def resized(self, total: int) -> TreePolicy | None:
        """Each part resized to ``total`` nodes where it can be (:meth:`TreePolicy.resized`; a part that cannot keeps
        its own trees); None where neither can."""
        greedy, sampled = self.greedy.resized(total), self.sampled.resized(total)
        if greedy is None and sampled is None:
            return None
        return ByTemperature(greedy or self.greedy, sampled or self.sampled)

    def grow(
        self, drafter: Drafter, root: torch.Tensor, sampling: SamplingParams, generator: torch.Generator | None
    ) -> DraftTree:
        return self.for_sampling(sampling).grow(drafter, root, sampling, generator)

    def __repr__(self) -> str:
        return f"ByTemperature(greedy={self.greedy!r}, sampled={self.sampled!r})"
