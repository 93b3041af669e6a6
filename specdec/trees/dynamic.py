"""EAGLE-2 dynamic trees: expand the most promising nodes, then keep the globally best ones.

The value of a node is the sum of draft log-probabilities along its root path (log of the product of draft
confidences), stored in :attr:`PartialTree.logq`.

Growth, with ``K = topk``:

* step 0: expand the root; its top-K children form level 1 and the first frontier;
* steps 1 .. depth-1: expand the K frontier nodes in ONE :meth:`~specdec.interfaces.Drafter.expand_topk` call; each
  proposes its top-K children; all ``K^2`` children enter the pool; the K best of them by value are the next
  frontier.

Rerank: keep the root and the ``total_tokens - 1`` best pool nodes by value, ties going to the smaller node id.
Ids are creation order, so a smaller id is never deeper. Because ``log q <= 0``, a child's value never exceeds
its parent's, and on equal values the parent (smaller id) sorts first; a stable sort therefore places every
parent before each of its children, and any prefix of that order (the kept set) is a connected tree. Kept nodes
are then ordered by id (parents first; siblings stay in rank order) and re-indexed.

Depth convention: ``depth`` is the number of expand calls and the largest node depth. The EAGLE-2 reference
counts its ``depth`` without the root step, so its ``depth=d`` corresponds to ``depth=d + 1`` here.

Candidates are a deterministic function of the context, so the tree is for the deterministic-candidate (one-hot
q) verifiers; :meth:`DynamicTreePolicy.grow` never touches the generator.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from specdec.interfaces import Drafter, TreePolicy
from specdec.sampling import SamplingParams
from specdec.tree import DraftTree, PartialTree
from specdec.tree_checks import checked_topk

__all__ = ["DynamicTreePolicy"]


#: The library's one set of dynamic-tree defaults (the named methods use them too,
#: :class:`specdec.methods.MethodOptions`): CPU-sized, measured on the 2-core machines of the results page. The
#: EAGLE-2 paper's GPU setting is K = 10, depth 5-6, 60 nodes; on a CPU a forward of 60 nodes costs several 1-token
#: steps, so smaller trees pay.
DEFAULT_TOPK, DEFAULT_DEPTH, DEFAULT_TOTAL_TOKENS = 8, 5, 24


class DynamicTreePolicy(TreePolicy):
    """EAGLE-2 dynamic draft tree.

    Args:
        topk: K, children proposed per expanded node and frontier width (clamped to the vocabulary size).
        depth: expansion steps, root step included; the maximum node depth.
        total_tokens: nodes kept after reranking, root included (the tree the target verifies).
        strict: check after every rerank that the kept set is connected (forces a host sync; for tests).

    Attributes:
        max_nodes: ``min(total_tokens, pool_capacity)``.
        max_depth: ``depth``.
        pool_capacity: ``1 + K + (depth - 1) * K^2``, every node growth can create.
    """

    def __init__(
        self,
        topk: int = DEFAULT_TOPK,
        depth: int = DEFAULT_DEPTH,
        total_tokens: int = DEFAULT_TOTAL_TOKENS,
        strict: bool = False,
    ) -> None:
        if topk < 1:
            raise ValueError(f"topk must be at least 1, got {topk}")
        if depth < 1:
            raise ValueError(f"depth must be at least 1, got {depth}")
        if total_tokens < 2:
            raise ValueError(f"total_tokens counts the root and must be at least 2, got {total_tokens}")
        self.topk = topk
        self.depth = depth
        self.total_tokens = total_tokens
        self.strict = strict
        self.pool_capacity = 1 + topk + (depth - 1) * topk * topk
        self.max_nodes = min(total_tokens, self.pool_capacity)
        self.max_depth = depth
        self._resized: dict[int, DynamicTreePolicy | None] = {}  # resized(total), built once per size

    def resized(self, total: int) -> DynamicTreePolicy | None:
        """Depth-1 trees of ``total`` nodes: the root's ``total - 1`` best children, one root step that a batch runs
        for all its rows in one head forward (:mod:`specdec.pace`); None past ``topk`` children or ``max_nodes``."""
        if total not in self._resized:  # asked per row and cycle in a batch: built once
            fits = 2 <= total <= min(self.max_nodes, self.topk + 1)
            self._resized[total] = DynamicTreePolicy(total - 1, 1, total, self.strict) if fits else None
        return self._resized[total]

    def expand_pool(
        self,
        drafter: Drafter,
        root: torch.Tensor,
        keep_going: Callable[[PartialTree, int, torch.Tensor], bool] | None = None,
    ) -> PartialTree:
        """Run up to ``depth`` expansion steps and return the whole candidate pool (before reranking).

        Args:
            drafter, root: as for :meth:`grow`.
            keep_going: called after each step as ``keep_going(tree, step, top_logq)`` (``step`` 0-based,
                ``top_logq [F, k]`` the log q of the children that step added, best first per row); False stops the
                growth there (the caller's cost model says the next level does not pay). After the last step its
                answer is not needed (growth ends there), but it still sees that step.
        """
        tree = PartialTree(root, self.pool_capacity)
        frontier = torch.zeros(1, dtype=torch.long, device=root.device)
        for step in range(self.depth):
            top_logq, top_tokens = checked_topk(drafter, tree, frontier, self.topk)  # [F, k], best first
            k = top_tokens.shape[-1]
            # A NaN row would make values incomparable; -inf keeps "child value <= parent value" true.
            top_logq = torch.nan_to_num(top_logq, nan=-torch.inf)
            value = tree.logq[frontier].unsqueeze(-1) + top_logq  # [F, k]
            ids = tree.add(frontier.repeat_interleave(k), top_tokens.reshape(-1), value.reshape(-1))
            if keep_going is not None and not keep_going(tree, step, top_logq):
                break
            if step + 1 < self.depth:
                best = torch.sort(value.reshape(-1), descending=True, stable=True).indices[: self.topk]
                frontier = ids[best]
        return tree

    def rerank(self, tree: PartialTree) -> DraftTree:
        """Keep the root and the best ``max_nodes - 1`` pool nodes, parents first, as a :class:`DraftTree`."""
        device = tree.device
        size = tree.size
        keep = min(self.max_nodes, size) - 1
        order = torch.sort(tree.logq[1:size], descending=True, stable=True).indices[:keep] + 1
        nodes = torch.cat([torch.zeros(1, dtype=torch.long, device=device), torch.sort(order).values])  # [n]
        n = nodes.shape[0]
        new_id = torch.full((size,), -1, dtype=torch.long, device=device)
        new_id[nodes] = torch.arange(n, device=device)
        old_parents = tree.parents[nodes]
        parents = torch.where(old_parents >= 0, new_id[old_parents.clamp(min=0)], old_parents)
        if self.strict and bool((parents[1:] < 0).any()):
            raise AssertionError("dynamic tree rerank kept a node without its parent")
        ancestors = tree.ancestors[nodes][:, nodes]  # the pool's rows cut to the kept nodes (parents are kept)
        return DraftTree.from_parents(tree.tokens[nodes], parents, self.max_depth, ancestors=ancestors)

    def grow(
        self,
        drafter: Drafter,
        root: torch.Tensor,
        sampling: SamplingParams,
        generator: torch.Generator | None,
    ) -> DraftTree:
        """Grow the pool with ``depth`` ``expand_topk`` calls and rerank it.

        Args:
            drafter: proposes the top-``topk`` children of ``F`` nodes per call (``F = 1`` for the root step, then up
                to ``topk``).
            root: 0-dim long, the last emitted token.
            sampling: unused (candidates are the draft's top-k regardless of temperature).
            generator: unused (deterministic policy).

        Returns:
            A :class:`DraftTree` of at most ``max_nodes`` nodes and depth at most ``depth``.
        """
        return self.rerank(self.expand_pool(drafter, root))

    def __repr__(self) -> str:
        return f"DynamicTreePolicy(topk={self.topk}, depth={self.depth}, total_tokens={self.total_tokens})"
