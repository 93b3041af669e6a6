"""Draft-tree carriers: the growing tree a policy builds, and the final tree the target verifies.

Conventions (all tensors on one device, ``N`` nodes, node 0 is the root):

* ``parents[i] < i`` for every non-root node, ``parents[0] == -1``: parents come before children.
* Siblings are ordered by index: the children of node ``u`` in increasing index order are the order in which
  the policy proposed them (rank for deterministic top-k, draw order for sampling without replacement).
  Verifiers rely on this order.
* The root is the token the target emitted last; it is not yet in the target's cache. Its depth is 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["PartialTree", "DraftTree", "ancestor_matrix"]


def ancestor_matrix(parents: torch.Tensor, max_depth: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Ancestor-or-self matrix and depth from a parent vector, with one tensor step per level.

    Args:
        parents: ``[N]`` long, ``-1`` for the root, parents before children.
        max_depth: an upper bound on the depth of any node (loop count; no host sync).

    Returns:
        ``anc [N, N]`` bool with ``anc[i, j]`` true iff ``j`` is ``i`` or an ancestor of ``i``;
        ``depth [N]`` long.
    """
    n = parents.shape[0]
    rows = torch.arange(n, device=parents.device)
    anc = torch.zeros(n, n, dtype=torch.bool, device=parents.device)
    anc[rows, rows] = True
    cur = parents.clone()
    for _ in range(max_depth):  # ids clamped into [0, n): a broken parent vector is named later, not a crash here
        has = cur >= 0
        anc[rows, cur.clamp(0, n - 1)] |= has
        cur = torch.where(has, parents[cur.clamp(0, n - 1)], cur)
    return anc, anc.sum(-1) - 1


class PartialTree:
    """The tree while a policy grows it; drafters read it to find each frontier node's ancestors.

    Node ids here are creation order (parents before children). Capacity is fixed up front so the
    buffers are allocated once per tree.

    Attributes:
        tokens: ``[cap]`` long token ids (valid up to ``size``).
        parents: ``[cap]`` long parent ids (``-1`` for the root).
        depth: ``[cap]`` long depth (root = 0).
        logq: ``[cap]`` float, sum of draft log-probabilities along the root path (the EAGLE-2 value).
        ancestors: ``[cap, cap]`` bool, ancestor-or-self rows.
        size: number of nodes so far (a Python int: growth is decided on the host by the policy's shape).
    """

    def __init__(self, root_token: torch.Tensor, capacity: int) -> None:
        device = root_token.device
        self.capacity = capacity
        self.tokens = torch.zeros(capacity, dtype=torch.long, device=device)
        self.parents = torch.full((capacity,), -1, dtype=torch.long, device=device)
        self.depth = torch.zeros(capacity, dtype=torch.long, device=device)
        self.logq = torch.zeros(capacity, dtype=torch.float32, device=device)
        self.ancestors = torch.zeros(capacity, capacity, dtype=torch.bool, device=device)
        self.tokens[0] = root_token.reshape(())
        self.ancestors[0, 0] = True
        self.size = 1

    @property
    def device(self) -> torch.device:
        return self.tokens.device

    def add(self, parents: torch.Tensor, tokens: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
        """Append ``M`` nodes.

        Args:
            parents: ``[M]`` long ids of existing nodes.
            tokens: ``[M]`` long token ids.
            logq: ``[M]`` float path values (sum of log q along the root path, this node included).

        Returns:
            ``[M]`` long ids of the new nodes.
        """
        m = parents.shape[0]
        if self.size + m > self.capacity:
            raise ValueError(f"PartialTree capacity {self.capacity} exceeded by adding {m} to {self.size} nodes")
        ids = torch.arange(self.size, self.size + m, device=self.device)
        self.tokens[ids] = tokens
        self.parents[ids] = parents
        self.depth[ids] = self.depth[parents] + 1
        self.logq[ids] = logq.to(self.logq.dtype)
        self.ancestors[ids] = self.ancestors[parents]
        self.ancestors[ids, ids] = True
        self.size += m
        return ids

    def ancestor_mask(self, nodes: torch.Tensor) -> torch.Tensor:
        """``[F, size]`` bool: row f marks ``nodes[f]`` and its ancestors among the current nodes."""
        return self.ancestors[nodes, : self.size]


@dataclass(frozen=True)
class DraftTree:
    """The tree the target verifies in one forward.

    Attributes:
        tokens: ``[N]`` long, ``tokens[0]`` is the root.
        parents: ``[N]`` long, ``-1`` for the root, ``parents[i] < i``.
        depth: ``[N]`` long, root = 0.
        attn_mask: ``[N, N]`` bool, node i attends to j iff j is i or an ancestor of i.
        paths: ``[N, max_depth + 1]`` long: row i is the root-to-i path (node ids), ``-1`` padded.
            Leaf rows are the root-to-leaf paths; see :meth:`leaf_paths`.
        max_depth: upper bound on ``depth`` (Python int; static for a policy).
        q_dist: ``[N, V]`` float or None. Stochastic candidates only: row u is the draft distribution q the
            children of u were drawn from (without replacement, in sibling order). Rows of leaves are unused.
            None means deterministic candidates (contract: q is one-hot, candidates are a function of context).
        q_cond: ``[N]`` float or None. Stochastic only: each node's conditional draft probability
            ``q(x_k) / (1 - sum_{j<k} q(x_j))`` given its earlier siblings (root entry unused). Informational:
            verifiers recompute it from ``q_dist``.
        point_mass: ``[N]`` bool or None. Mixed trees only (sampled and deterministic children side by side, e.g. a
            retrieval chain beside an EAGLE sample): true for a child proposed as a point mass (a deterministic
            function of the context and of its earlier siblings), false for a child drawn from its parent's
            ``q_dist`` row without replacement among the parent's *sampled* children. None: every child is of the
            tree's one kind (``q_dist`` set: all sampled; unset: all deterministic).
    """

    tokens: torch.Tensor
    parents: torch.Tensor
    depth: torch.Tensor
    attn_mask: torch.Tensor
    paths: torch.Tensor
    max_depth: int
    q_dist: torch.Tensor | None = None
    q_cond: torch.Tensor | None = None
    point_mass: torch.Tensor | None = None

    @property
    def num_nodes(self) -> int:
        return self.tokens.shape[0]

    @property
    def is_stochastic(self) -> bool:
        return self.q_dist is not None

    @property
    def is_mixed(self) -> bool:
        """Sampled children and point-mass children in one tree (``q_dist`` and ``point_mass`` both set)."""
        return self.q_dist is not None and self.point_mass is not None

    @property
    def device(self) -> torch.device:
        return self.tokens.device

    def position_ids(self, offset: int) -> torch.Tensor:
        """``[N]`` absolute positions when the root sits at position ``offset``."""
        return self.depth + offset

    def leaf_paths(self) -> torch.Tensor:
        """``[leaves, max_depth + 1]`` root-to-leaf node ids, ``-1`` padded (host sync: data-dependent size)."""
        is_leaf = torch.ones(self.num_nodes, dtype=torch.bool, device=self.device)
        is_leaf[self.parents[1:]] = False
        return self.paths[is_leaf]

    @classmethod
    def single(cls, token: torch.Tensor, vocab: int | None = None) -> DraftTree:
        """A root-only tree (vanilla decoding step); with ``vocab``, as a sampled tree (``q_dist [1, vocab]`` zero:
        the root is a leaf, nothing was drawn; ``q_cond [1]`` one)."""
        parents = torch.full((1,), -1, dtype=torch.long, device=token.device)
        if vocab is None:
            return cls.from_parents(token.reshape(1), parents, 0)
        q_dist = torch.zeros(1, vocab, dtype=torch.float32, device=token.device)
        q_cond = torch.ones(1, dtype=torch.float32, device=token.device)
        return cls.from_parents(token.reshape(1), parents, 0, q_dist, q_cond)

    @classmethod
    def from_parents(
        cls,
        tokens: torch.Tensor,
        parents: torch.Tensor,
        max_depth: int,
        q_dist: torch.Tensor | None = None,
        q_cond: torch.Tensor | None = None,
        ancestors: torch.Tensor | None = None,
        point_mass: torch.Tensor | None = None,
    ) -> DraftTree:
        """Build mask, depth and paths with one tensor step per level (no per-node Python loop).

        Args:
            tokens: ``[N]`` long, root first.
            parents: ``[N]`` long, ``-1`` for the root, ``parents[i] < i``.
            max_depth: upper bound on the depth of any node.
            q_dist, q_cond: see the class docstring (stochastic candidates only).
            point_mass: see the class docstring (mixed trees only; needs ``q_dist``).
            ancestors: ``[N, N]`` bool ancestor-or-self matrix of ``parents`` when the caller already has it (a
                policy cutting a subtree out of its pool); contract: equal to :func:`ancestor_matrix`'s.
        """
        if tokens.ndim != 1 or parents.shape != tokens.shape:
            raise ValueError(f"tokens {tuple(tokens.shape)} and parents {tuple(parents.shape)} must both be [N]")
        n = tokens.shape[0]
        if ancestors is None:
            anc, depth = ancestor_matrix(parents, max_depth)
        elif ancestors.shape != (n, n):
            raise ValueError(f"ancestors {tuple(ancestors.shape)} must be [{n}, {n}]")
        else:
            anc, depth = ancestors, ancestors.sum(-1) - 1
        # Node j on i's root path sits at column depth[j] of row i. Parents come before children, so j's depth is
        # its rank among i's ancestors. Other pairs write to a spare column that is dropped (no host sync).
        cols = torch.where(anc, depth[None, :], max_depth + 1)  # [N, N]
        ids = torch.arange(n, device=tokens.device).expand(n, n)
        paths = torch.full((n, max_depth + 2), -1, dtype=torch.long, device=tokens.device).scatter_(1, cols, ids)
        if point_mass is not None and (q_dist is None or point_mass.shape != tokens.shape):
            raise ValueError("point_mass [N] marks the deterministic children of a tree with sampled ones (q_dist)")
        return cls(tokens, parents, depth, anc, paths[:, : max_depth + 1], max_depth, q_dist, q_cond, point_mass)
