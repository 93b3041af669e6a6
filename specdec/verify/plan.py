"""The plan every verifier computes, and the tensor helpers the plans share.

A verifier here is "plan + shared walk" (:class:`~specdec.verify.base.PlanVerifier`, :mod:`specdec.verify.walk`):

* the *plan* says, for every node ``c``, the probability of accepting ``c`` given that its parent was reached
  and all earlier siblings were rejected, and, for every node ``u``, the distribution of the bonus token when
  the walk stops at ``u``;
* the *walk* draws the coins and follows the plan.

Splitting the two is what makes the verifiers provable: the exact suite (:mod:`specdec.testing.exact`) turns a
plan into the exact distribution of the emitted tokens, so a wrong plan cannot hide behind sampling noise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from specdec.tree import DraftTree

__all__ = [
    "VerifyPlan",
    "safe_div",
    "parent_index",
    "sibling_pairs",
    "earlier_siblings",
    "without_children",
    "has_children",
    "token_mask",
    "children_token_mask",
]


@dataclass(frozen=True)
class VerifyPlan:
    """What a verifier decided before any coin is drawn.

    Attributes:
        accept_prob: ``[N]`` float. Entry ``c`` is the probability of accepting node ``c`` given that its parent
            was reached and every earlier sibling (same parent, lower index) was rejected. The root entry is
            unused (set to 1).
        residual: ``[N, V]`` float. Row ``u`` is the distribution of the bonus token when the walk stops at
            ``u`` (all of ``u``'s children rejected, or ``u`` a leaf). Rows sum to 1. Optional: a plan may give
            the same rows as ``residual_at`` or ``bonus`` instead (see :meth:`rows`).
        bonus: optional ``[N]`` long, for plans whose every residual row is a point mass (greedy): row ``u`` is
            the one-hot of ``bonus[u]``. The walk then reads the bonus token instead of drawing it (the same
            law; drawing from a ``V``-wide row costs ~0.7 ms on a CPU for ``V = 49152``), and the plan need not
            build the ``[N, V]`` rows at all.
        residual_at: optional function ``nodes [...] long -> [..., V]`` giving those nodes' residual rows on
            demand. The walk stops at one node and needs one row: a plan that would spend several ``[N, V]``
            passes on rows nobody reads builds that one (the multi-round plan does).
        vocab_size: ``V``, required with ``bonus`` alone.

    Contract: :meth:`rows` reads the fields in the walk's order (``bonus`` first), and :meth:`residual_rows` (every
    node, what the exact suite checks) runs the same code as the walk's one row.
    """

    accept_prob: torch.Tensor
    residual: torch.Tensor | None = None
    bonus: torch.Tensor | None = None
    residual_at: Callable[[torch.Tensor], torch.Tensor] | None = None
    vocab_size: int | None = None

    def __post_init__(self) -> None:
        if self.residual is None and self.residual_at is None and self.bonus is None:
            raise ValueError("a VerifyPlan needs residual [N, V], residual_at, or point-mass bonus [N]")
        if self.bonus is not None and self.residual is None and self.vocab_size is None:
            raise ValueError("a VerifyPlan with point-mass bonus [N] and no residual [N, V] needs vocab_size")

    @property
    def vocab(self) -> int:
        """``V`` of a plan with ``bonus`` (from ``residual`` or ``vocab_size``, which such a plan has)."""
        return self.residual.shape[-1] if self.residual is not None else int(self.vocab_size)

    def rows(self, nodes: torch.Tensor) -> torch.Tensor:
        """``[..., V]`` the bonus law at ``nodes [...]`` (long), read as the walk reads it: the one-hots of ``bonus``
        when it is given (whatever ``residual`` says), else ``residual_at``, else ``residual``."""
        if self.bonus is not None:
            out = torch.zeros(*nodes.shape, self.vocab, dtype=self.accept_prob.dtype, device=self.bonus.device)
            return out.scatter_(-1, self.bonus[nodes][..., None], 1.0)
        if self.residual_at is not None:
            return self.residual_at(nodes)
        return self.residual[nodes]

    def residual_rows(self) -> torch.Tensor:
        """``[N, V]``: every node's residual row (for checks and tools; the walk reads one row, or ``bonus``)."""
        return self.rows(torch.arange(self.accept_prob.shape[0], device=self.accept_prob.device))

    @classmethod
    def from_stop_probs(
        cls,
        tree: DraftTree,
        stop_prob: torch.Tensor,
        residual: torch.Tensor | None = None,
        residual_at: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> VerifyPlan:
        """The plan whose walk stops at node ``u`` with probability ``stop_prob[u]``.

        For verifiers defined by the law of *where* the accepted path ends rather than by per-node coins (block
        verification picks the last position that passes, not the first that fails). Any distribution over end
        nodes has one sequential form. Let ``R(u) = sum of stop_prob over u's subtree``, the probability that the
        path reaches ``u``. Then, given that parent ``u`` was reached and its earlier children ``c_1 .. c_{j-1}``
        were rejected, child ``c_j`` is accepted with probability ``R(c_j) / (R(u) - R(c_1) - ... - R(c_{j-1}))``.
        The denominator is the probability of still being in play. It is at least ``R(c_j)``, so the value is at
        most 1. The walk then stops at ``u`` with probability ``R(u) - sum_children R(c) = stop_prob[u]``.

        Args:
            tree: ``N`` nodes.
            stop_prob: ``[N]`` non-negative, sums to 1.
            residual: ``[N, V]``: the bonus distribution when the path ends at each node; or
            residual_at: the same rows on demand (see the class docstring).
        """
        reach = tree.attn_mask.to(stop_prob.dtype).T @ stop_prob  # [N]: R(u) = sum over u's subtree
        parent = parent_index(tree)
        in_play = reach[parent] - earlier_siblings(tree).to(stop_prob.dtype) @ reach
        accept = safe_div(reach, in_play).clamp(0.0, 1.0)
        accept = torch.where(torch.arange(tree.num_nodes, device=tree.device) == 0, 1.0, accept)
        return cls(accept_prob=accept, residual=residual, residual_at=residual_at)

    def stop_probs(self, tree: DraftTree) -> torch.Tensor:
        """``[N]``: the probability that the walk stops at each node under this plan (the inverse of
        :meth:`from_stop_probs`), in closed form for trees of any size, no host sync.

        With ``a = clamp(accept_prob, 0, 1)`` (NaN -> 0): node ``c`` is reached with probability ``prod`` over the
        nodes ``w`` on its root path (root excluded) of ``a_w prod_{earlier siblings j of w} (1 - a_j)``, and the
        walk stops at ``u`` with that probability times ``prod_{children c of u} (1 - a_c)``. ``stop @ tree.depth``
        is the expected number of accepted draft tokens. (The exact suite does not use this formula: it enumerates
        the coins through the walk's own code, and a test checks the two agree.)
        """
        a = torch.nan_to_num(self.accept_prob, nan=0.0).clamp(0.0, 1.0)
        n = tree.num_nodes
        one = torch.ones_like(a)
        keep = 1.0 - a
        before = torch.where(earlier_siblings(tree), keep[None, :], one[None, :]).prod(-1)  # [N]
        step = torch.where(torch.arange(n, device=a.device) == 0, one, a * before)
        reach = torch.where(tree.attn_mask, step[None, :], one[None, :]).prod(-1)  # ancestors-or-self
        child = (tree.parents[None, :] == torch.arange(n, device=a.device)[:, None]) & (tree.parents[None, :] >= 0)
        return reach * torch.where(child, keep[None, :], one[None, :]).prod(-1)


def safe_div(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """``num / den`` where ``den > 0``, else 0 (so 0/0 -> 0); shapes broadcast."""
    return torch.where(den > 0, num / torch.where(den > 0, den, torch.ones_like(den)), torch.zeros_like(num))


def parent_index(tree: DraftTree) -> torch.Tensor:
    """``[N]`` long parent ids with the root mapped to itself (0), safe for gathering."""
    return tree.parents.clamp(min=0)


def sibling_pairs(tree: DraftTree) -> torch.Tensor:
    """``[N, N]`` bool: ``[c, j]`` true iff ``c`` and ``j`` are non-root nodes with the same parent (``j = c`` too)."""
    non_root = torch.arange(tree.num_nodes, device=tree.device) > 0
    return (tree.parents[:, None] == tree.parents[None, :]) & non_root[:, None] & non_root[None, :]


def earlier_siblings(tree: DraftTree) -> torch.Tensor:
    """``[N, N]`` bool: ``[c, j]`` true iff ``j`` is a sibling of ``c`` with a lower index (root: none)."""
    idx = torch.arange(tree.num_nodes, device=tree.device)
    return sibling_pairs(tree) & (idx[None, :] < idx[:, None])


def without_children(tree: DraftTree, rows: torch.Tensor) -> torch.Tensor:
    """``[N, V]``: a copy of ``rows`` (row ``u`` for the children of ``u``) with each row's child tokens zeroed, so
    that its sum is the mass no child carries (summed from non-negative terms: it cannot cancel)."""
    zero = torch.zeros((), dtype=rows.dtype, device=rows.device).expand(tree.num_nodes - 1)
    return rows.index_put((tree.parents[1:], tree.tokens[1:]), zero)  # duplicate pairs write the same 0


def has_children(tree: DraftTree) -> torch.Tensor:
    """``[N]`` bool: node has at least one child."""
    out = torch.zeros(tree.num_nodes, dtype=torch.bool, device=tree.device)
    return out.index_fill(0, tree.parents[1:], True)


def token_mask(
    rows: torch.Tensor, tokens: torch.Tensor, select: torch.Tensor, num_rows: int, vocab: int
) -> torch.Tensor:
    """``[num_rows, vocab]`` bool with ``[rows[i], tokens[i]]`` set wherever ``select[i]`` (no host sync).

    Args:
        rows, tokens: ``[M]`` long.
        select: ``[M]`` bool; unselected pairs leave the mask unchanged.
    """
    acc = torch.zeros(num_rows, vocab, dtype=torch.int32, device=tokens.device)
    acc.index_put_((rows, tokens), select.to(torch.int32), accumulate=True)
    return acc > 0


def children_token_mask(tree: DraftTree, vocab: int) -> torch.Tensor:
    """``[N, V]`` bool: ``[u, x]`` true iff some child of ``u`` carries token ``x``."""
    n = tree.num_nodes
    select = torch.ones(n - 1, dtype=torch.bool, device=tree.device)
    return token_mask(tree.parents[1:], tree.tokens[1:], select, n, vocab)
