"""Verification cases: a tiny target process, a tree shape and (for sampled trees) a tiny draft process.

A :class:`VerifyCase` describes one verification cycle completely, so that the distribution of what the
speculative decoder emits can be computed exactly (:mod:`specdec.testing.exact`) or sampled
(:mod:`specdec.testing.stats`).

Prefixes are the tokens emitted *after* the root (the root token is a constant of the case). ``D`` is the case
depth: the target is tabulated for every prefix of length ``0 .. D`` over a vocabulary of ``V`` tokens, and the
compared object is the distribution over the ``V ** (D + 1)`` sequences of ``D + 1`` tokens: what one cycle emits
(accepted tokens, then the bonus), continued with the target process up to ``D + 1`` tokens.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from specdec.sampling import SamplingParams, sample, warp
from specdec.tree import DraftTree

__all__ = ["VerifyCase", "prefix_index"]


def prefix_index(prefix: Sequence[int], vocab_size: int) -> int:
    """Row of ``prefix`` in a table of shape ``[V] * len(prefix) + [...]`` flattened over the prefix axes."""
    out = 0
    for t in prefix:
        out = out * vocab_size + int(t)
    return out


@dataclass(frozen=True, eq=False)
class VerifyCase:
    """One verification cycle with a tabulated target (and draft, for sampled candidates).

    Attributes:
        target_logits: ``D + 1`` tensors; entry ``d`` has shape ``[V] * d + [V]`` and holds the target's logits
            for the token after each prefix of length ``d`` (``-inf`` allowed, at least one finite per row).
            The target process is ``warp(logits, sampling)``.
        parents: the tree shape, ``parents[0] == -1`` and ``parents[i] < i`` (siblings tried in index order).
        sampling: sampling settings of both the target process and the verifier.
        tokens: deterministic candidates: the token of every node (``tokens[0]`` is the root; duplicates among
            siblings allowed). None for sampled candidates.
        draft_probs: sampled candidates: ``D + 1`` tensors shaped like ``target_logits`` holding the draft
            probabilities q after each prefix. The children of a node are drawn without replacement from q after
            the node's prefix, in index order. None for deterministic candidates.
        point_mass: mixed trees (with ``draft_probs``): per node, true for a point-mass child (a retrieval
            drafter's proposal) beside the draws. Its token is read from ``point_tokens``; the drawn children of the
            same node come from q with the point-mass siblings' tokens removed and renormalised (what the composite
            policy draws; the tree records that q), unless ``draws_avoid_points`` is False.
        point_tokens: mixed trees: ``D + 1`` long tensors, entry ``d`` shaped ``[V] * d + [P]``: the tokens the
            point-mass children of a node at depth ``d`` propose after the node's prefix, the ``j``-th point-mass
            child taking column ``j``.
        draws_avoid_points: mixed trees: the draws skip the point-mass siblings' tokens (default) or not (then a
            draw may repeat a point mass).
        name: shown in assertion messages.
    """

    target_logits: tuple[torch.Tensor, ...]
    parents: tuple[int, ...]
    sampling: SamplingParams
    tokens: tuple[int, ...] | None = None
    draft_probs: tuple[torch.Tensor, ...] | None = None
    name: str = ""
    point_mass: tuple[bool, ...] | None = None
    point_tokens: tuple[torch.Tensor, ...] | None = None
    draws_avoid_points: bool = True
    _children: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)
    _depths: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        logits = tuple(torch.as_tensor(t, dtype=torch.float64) for t in self.target_logits)
        object.__setattr__(self, "target_logits", logits)
        object.__setattr__(self, "parents", tuple(int(p) for p in self.parents))
        if not logits:
            raise ValueError("target_logits needs at least the table for the empty prefix")
        v = logits[0].shape[-1]
        for d, t in enumerate(logits):
            if tuple(t.shape) != (v,) * (d + 1):
                raise ValueError(f"target_logits[{d}] must have shape {(v,) * (d + 1)}, got {tuple(t.shape)}")
            if torch.isnan(t).any() or torch.isposinf(t).any() or not torch.isfinite(t).any(-1).all():
                raise ValueError(f"target_logits[{d}] has NaN/+inf or an all -inf row")
        n = len(self.parents)
        if n < 1 or self.parents[0] != -1 or any(not 0 <= self.parents[i] < i for i in range(1, n)):
            raise ValueError(f"parents must start with -1 and have 0 <= parents[i] < i, got {self.parents}")
        depths = [0] * n
        children: list[list[int]] = [[] for _ in range(n)]
        for i in range(1, n):
            depths[i] = depths[self.parents[i]] + 1
            children[self.parents[i]].append(i)
        object.__setattr__(self, "_depths", tuple(depths))
        object.__setattr__(self, "_children", tuple(tuple(c) for c in children))
        if max(depths) > self.depth:
            raise ValueError(f"tree depth {max(depths)} exceeds the case depth {self.depth}")
        if (self.tokens is None) == (self.draft_probs is None):
            raise ValueError("give exactly one of tokens (deterministic candidates) or draft_probs (sampled)")
        if self.tokens is not None:
            object.__setattr__(self, "tokens", tuple(int(t) for t in self.tokens))
            if len(self.tokens) != n or any(not 0 <= t < v for t in self.tokens):
                raise ValueError(f"tokens must be {n} ids in [0, {v}), got {self.tokens}")
        else:
            q = tuple(torch.as_tensor(t, dtype=torch.float64) for t in self.draft_probs)
            object.__setattr__(self, "draft_probs", q)
            if len(q) != len(logits) or any(a.shape != b.shape for a, b in zip(q, logits, strict=True)):
                raise ValueError("draft_probs must have the same shapes as target_logits")
            for d, t in enumerate(q):
                if (t < 0).any() or not torch.allclose(t.sum(-1), torch.ones((), dtype=torch.float64), atol=1e-9):
                    raise ValueError(f"draft_probs[{d}] rows must be distributions")
            self._check_points(n, depths, children, v)
            for u in range(n):
                k = len(children[u])
                if k and int((q[depths[u]] > 0).sum(-1).min()) < k:
                    raise ValueError(
                        f"node {u} draws {k} children without replacement but some draft row at depth {depths[u]} "
                        f"has fewer than {k} nonzero entries"
                    )

    def _check_points(self, n: int, depths: list[int], children: list[list[int]], v: int) -> None:
        """Validate the mixed-tree fields (``point_mass`` with ``point_tokens``)."""
        if (self.point_mass is None) != (self.point_tokens is None):
            raise ValueError("give point_mass and point_tokens together (mixed trees)")
        if self.point_mass is None:
            return
        mass = tuple(bool(b) for b in self.point_mass)
        tables = tuple(torch.as_tensor(t, dtype=torch.long) for t in self.point_tokens)
        object.__setattr__(self, "point_mass", mass)
        object.__setattr__(self, "point_tokens", tables)
        if len(mass) != n or mass[0]:
            raise ValueError(f"point_mass must be {n} flags with the root's False, got {mass}")
        if len(tables) != len(self.target_logits) or any((t < 0).any() or (t >= v).any() for t in tables):
            raise ValueError(f"point_tokens needs D + 1 tables of ids in [0, {v})")
        for u in range(n):
            width = sum(mass[c] for c in children[u])
            if width > tables[depths[u]].shape[-1]:
                raise ValueError(f"node {u} has {width} point-mass children; point_tokens[{depths[u]}] has fewer")

    @property
    def is_mixed(self) -> bool:
        return self.point_mass is not None

    def _point_tokens(self, prefix: Sequence[int], kids: Sequence[int]) -> dict[int, int]:
        """``{child: token}`` for the point-mass children ``kids`` of the node after ``prefix``."""
        row = self.point_tokens[len(prefix)][tuple(prefix)].tolist()
        points = [c for c in kids if self.point_mass[c]]
        return {c: int(row[j]) for j, c in enumerate(points)}

    def _draw_row(self, prefix: Sequence[int], avoid: Sequence[int]) -> torch.Tensor:
        """``[V]`` the q the drawn children come from: q after ``prefix`` without the ``avoid`` tokens, renormalised."""
        q = self.draft_row(prefix).clone()
        if self.draws_avoid_points and avoid:
            q[list(avoid)] = 0.0
            q = q / q.sum()
        return q

    @classmethod
    def from_functions(
        cls,
        target_fn: Callable[[tuple[int, ...]], torch.Tensor],
        vocab_size: int,
        parents: Sequence[int],
        sampling: SamplingParams,
        depth: int | None = None,
        tokens: Sequence[int] | None = None,
        draft_fn: Callable[[tuple[int, ...]], torch.Tensor] | None = None,
        name: str = "",
    ) -> VerifyCase:
        """Tabulate ``target_fn(prefix) -> [V] logits`` (and ``draft_fn(prefix) -> [V] probs``) for every prefix.

        ``depth`` defaults to the depth of the tree.
        """
        n = len(parents)
        depths = [0] * n
        for i in range(1, n):
            depths[i] = depths[parents[i]] + 1
        depth = max(depths) if depth is None else depth

        def table(fn: Callable[[tuple[int, ...]], torch.Tensor], d: int) -> torch.Tensor:
            rows = [
                torch.as_tensor(fn(pre), dtype=torch.float64) for pre in itertools.product(range(vocab_size), repeat=d)
            ]
            if rows[0].shape != (vocab_size,):  # one prefix shows it: every row is stacked into one table
                raise ValueError(
                    f"{getattr(fn, '__name__', 'the function')}(prefix) returned shape {tuple(rows[0].shape)}; "
                    f"vocab_size={vocab_size} needs [{vocab_size}]"
                )
            return torch.stack(rows).reshape((vocab_size,) * (d + 1))

        logits = tuple(table(target_fn, d) for d in range(depth + 1))
        q = None if draft_fn is None else tuple(table(draft_fn, d) for d in range(depth + 1))
        return cls(logits, tuple(parents), sampling, None if tokens is None else tuple(tokens), q, name)

    @property
    def vocab_size(self) -> int:
        return self.target_logits[0].shape[-1]

    @property
    def depth(self) -> int:
        """``D``: the compared sequences have ``D + 1`` tokens."""
        return len(self.target_logits) - 1

    @property
    def num_nodes(self) -> int:
        return len(self.parents)

    @property
    def is_stochastic(self) -> bool:
        return self.draft_probs is not None

    @property
    def node_depths(self) -> tuple[int, ...]:
        return self._depths

    @property
    def children(self) -> tuple[tuple[int, ...], ...]:
        """Children of every node in index (= trial) order."""
        return self._children

    def prefix(self, tokens: Sequence[int], node: int) -> tuple[int, ...]:
        """Tokens on the path from the root (excluded) to ``node`` (included)."""
        out: list[int] = []
        while node > 0:
            out.append(tokens[node])
            node = self.parents[node]
        return tuple(reversed(out))

    def target_row(self, prefix: Sequence[int]) -> torch.Tensor:
        """``[V]`` target logits after ``prefix``."""
        return self.target_logits[len(prefix)][tuple(prefix)]

    def draft_row(self, prefix: Sequence[int]) -> torch.Tensor:
        """``[V]`` draft probabilities after ``prefix`` (sampled candidates only)."""
        assert self.draft_probs is not None
        return self.draft_probs[len(prefix)][tuple(prefix)]

    def target_conditionals(self) -> tuple[torch.Tensor, ...]:
        """``D + 1`` float64 tensors ``warp(target_logits[d], sampling)``, shape ``[V] * (d + 1)``."""
        return tuple(warp(t, self.sampling, torch.float64) for t in self.target_logits)

    def build_tree(self, tokens: Sequence[int]) -> tuple[DraftTree, torch.Tensor]:
        """The :class:`DraftTree` with these node tokens and its target logits.

        Returns:
            ``(tree, target_logits [N, V] float64)``. For sampled candidates ``tree.q_dist [N, V]`` holds q after
            each node's prefix and ``tree.q_cond [N]`` the conditional draw probabilities.
        """
        prefixes = [self.prefix(tokens, u) for u in range(self.num_nodes)]
        logits = torch.stack([self.target_row(pre) for pre in prefixes])
        q_dist = q_cond = point_mass = None
        if self.is_stochastic:
            rows = []
            for u, pre in enumerate(prefixes):
                avoid = self._point_tokens(pre, self._children[u]).values() if self.is_mixed else ()
                rows.append(self._draw_row(pre, list(avoid)))
            q_dist = torch.stack(rows)
            cond = [1.0] * self.num_nodes
            for u, kids in enumerate(self._children):
                used = 0.0
                for c in kids:
                    if self.is_mixed and self.point_mass[c]:
                        continue
                    qc = float(q_dist[u, tokens[c]])
                    cond[c] = qc / (1.0 - used) if used < 1.0 else 0.0
                    used += qc
            q_cond = torch.tensor(cond, dtype=torch.float64)
            if self.is_mixed:
                point_mass = torch.tensor(self.point_mass, dtype=torch.bool)
        tree = DraftTree.from_parents(
            torch.tensor(list(tokens), dtype=torch.long),
            torch.tensor(self.parents, dtype=torch.long),
            self.depth,
            q_dist,
            q_cond,
            point_mass=point_mass,
        )
        return tree, logits

    def enumerate_trees(self, max_trees: int = 20000) -> list[tuple[tuple[int, ...], float]]:
        """Every possible token assignment of the tree with its probability.

        Deterministic candidates: the one assignment, probability 1. Sampled candidates: every ordered draw
        without replacement at every internal node (nodes in index order, so a node's prefix is known when its
        children are drawn), with probability ``prod q(x_k) / (1 - sum_{j<k} q(x_j))``; zero-probability draws
        are skipped.

        Raises:
            ValueError: if there are more than ``max_trees`` assignments.
        """
        if self.tokens is not None:
            return [(self.tokens, 1.0)]
        out: list[tuple[tuple[int, ...], float]] = []
        n = self.num_nodes
        rows: dict[tuple[int, ...], list[float]] = {}

        def q_row(prefix: tuple[int, ...]) -> list[float]:
            if prefix not in rows:
                rows[prefix] = self.draft_row(prefix).tolist()
                if abs(math.fsum(rows[prefix]) - 1.0) > 1e-9:
                    raise AssertionError(f"draft row {prefix} sums to {math.fsum(rows[prefix])}, not 1")
            return rows[prefix]

        def visit(u: int, tokens: list[int], weight: float) -> None:
            if u == n:
                out.append((tuple(tokens), weight))
                if len(out) > max_trees:
                    raise ValueError(f"more than {max_trees} candidate draws; use a smaller case")
                return
            kids = self._children[u]
            if not kids:
                visit(u + 1, tokens, weight)
                return
            prefix = self.prefix(tokens, u)
            if self.is_mixed:  # point masses are fixed by the prefix; the draws fill the other children
                points = self._point_tokens(prefix, kids)
                for c, x in points.items():
                    tokens[c] = x
                kids = tuple(c for c in kids if c not in points)
                q = self._draw_row(prefix, list(points.values())).tolist()
                if not kids:
                    visit(u + 1, tokens, weight)
                    return
            else:
                q = q_row(prefix)
            support = [x for x in range(self.vocab_size) if q[x] > 0]
            for draw in itertools.permutations(support, len(kids)):
                prob, left = 1.0, list(support)
                for x in draw:  # without replacement: x's share of the mass not drawn yet (summed, not 1 - used,
                    prob *= q[x] / math.fsum(q[y] for y in left)  # which cancels badly next to a q of nearly 1)
                    left.remove(x)
                for c, x in zip(kids, draw, strict=True):
                    tokens[c] = x
                visit(u + 1, tokens, weight * prob)

        visit(0, [0] * n, 1.0)
        total = math.fsum(w for _, w in out)
        if abs(total - 1.0) > 1e-9:
            raise AssertionError(f"candidate draw probabilities sum to {total}, not 1")
        return out

    def sample_tokens(self, generator: torch.Generator) -> tuple[int, ...]:
        """One token assignment: deterministic tokens, or a fresh draw without replacement at every internal node."""
        if self.tokens is not None:
            return self.tokens
        tokens = [0] * self.num_nodes
        for u, kids in enumerate(self._children):
            if not kids:
                continue
            prefix = self.prefix(tokens, u)
            points = self._point_tokens(prefix, kids) if self.is_mixed else {}
            for c, x in points.items():
                tokens[c] = x
            q = self._draw_row(prefix, list(points.values()))
            for c in (c for c in kids if c not in points):
                x = int(sample(q, generator))
                tokens[c] = x
                q[x] = 0.0
        return tuple(tokens)
