"""Multi-round verification of mixed sibling groups: draws from q beside point masses (composite drafters).

A composite drafter puts candidates of different drafters under one node: EAGLE's children drawn without
replacement from its q, and a retrieval drafter's continuation, a point mass (:class:`~specdec.tree.DraftTree`
``point_mass``). Every child is judged against the distribution it was actually proposed from.
"""

from __future__ import annotations

import torch

from specdec.interfaces import TreeKind
from specdec.sampling import SamplingParams, warp
from specdec.tree import DraftTree
from specdec.verify.base import PlanVerifier
from specdec.verify.native import native_plan
from specdec.verify.plan import (
    VerifyPlan,
    earlier_siblings,
    parent_index,
    safe_div,
    sibling_pairs,
    token_mask,
    without_children,
)

__all__ = ["MixedMultiRoundVerifier", "mixed_multiround_plan"]


class MixedMultiRoundVerifier(PlanVerifier):
    """Multi-round rejection sampling where each child carries its own proposal: a draw or a point mass.

    At a node ``u`` with children ``x_1 .. x_K`` (index order), start from ``p_0 = p_u`` and for ``k = 1 .. K`` let
    ``q_k`` be the distribution ``x_k`` was proposed from *given the earlier siblings*:

    * a point mass (``point_mass[x_k]``): ``q_k = delta(x_k)``;
    * a draw: ``q_k`` = ``q_dist[u]`` without the tokens of the earlier *drawn* siblings, renormalised (the draws
      are without replacement among themselves and ignore the point masses).

    Accept ``x_k`` with probability ``min(1, p_{k-1}(x_k) / q_k(x_k))``; on rejection ``p_k = norm(max(0, p_{k-1} -
    q_k))``. If all are rejected the bonus is drawn from ``p_K`` (a leaf's from ``p_u``). For a point mass the rule
    is the deterministic one (accept with ``p_{k-1}(x)``, then zero ``x`` and renormalise), for a draw the
    stochastic one; with no point masses this is :class:`~specdec.verify.StochasticMultiRoundVerifier`, with no
    draws :class:`~specdec.verify.MultiRoundVerifier`.

    Contract: ``q_dist[u]`` is the distribution the drawn children of ``u`` came from, in sibling order, without
    replacement; a point-mass child is a function of the context and of its earlier siblings; nothing depends on
    this verifier's coins.

    Why it is lossless. One round is speculative sampling with proposal ``q_k``: given the history ``H`` of the earlier
    siblings (tokens and rejections), ``x_k ~ q_k(.|H)`` is accepted with ``min(1, p/q)``, which emits ``y`` with
    probability ``min(p(y), q(y))``, and is rejected with probability ``Z = sum max(0, p - q)``. By induction on the
    rounds left, whatever happens after a rejection emits a first token ``~ p_k = max(0, p - q) / Z`` for every
    ``H``, because each later round again proposes from a known law given its own history. So the round emits
    ``min(p, q) + max(0, p - q) = p``. Nothing in the argument asks the rounds to share one q: draws and point
    masses may interleave in any order. Given the accepted child the walk continues in its subtree, so by induction
    over depth the emitted sequence follows the target process.

    Closed form (how it runs). In every state reached with positive probability,
    ``p_k = max(0, p m_k - t_k q) / R_k``, with ``m_k`` the indicator of the tokens *not* tried as point masses so
    far, ``t_0 = 0``, ``R_k`` the row's sum, and, after a rejected draw with ``Z_k = 1 - q(earlier draws)``,
    ``t_{k+1} = t_k + R_k / Z_k``. A rejected point mass ``x``: ``p_k`` with ``x`` zeroed is the same form with
    ``x`` dropped from ``m``. A rejected draw: on tokens not drawn, ``p_k - q / Z_k`` is ``(p m - t_{k+1} q) / R_k``
    where ``p m > t_k q`` and negative elsewhere (where ``p m - t_{k+1} q`` is negative too); a drawn token was
    rejected with positive probability only if its ``p_k`` was below ``q_k``, so it is 0 on both sides. The first
    round needs no pass over ``V`` (``R_0 = 1``); each later one builds the rows of the parents that have a child
    of that rank (one host read per round: usually the root alone) and their sums, and the walk builds the one
    bonus row it samples from (``residual_at``).

    Args:
        dtype: dtype of the plan's probabilities.
        max_children: an upper bound on the number of children of any node (rounds); ``None`` reads it from the tree.
    """

    reads_point_masses = True

    def __init__(self, dtype: torch.dtype = torch.float32, max_children: int | None = None) -> None:
        super().__init__(dtype)
        self.max_children = max_children

    def refuses(self, kind: TreeKind, sampling: SamplingParams) -> str | None:
        if not kind.sampled:
            at = " at temperature 0" if sampling.greedy else ""
            return f"MixedMultiRoundVerifier needs sampled candidates (q); the policy grows {kind.describe()}{at}"
        return None

    def plan(self, tree: DraftTree, target_logits: torch.Tensor, sampling: SamplingParams) -> VerifyPlan:
        """``accept_prob [N]`` and the residual rows from p = ``warp(target_logits)``, ``q = tree.q_dist`` and
        ``tree.point_mass`` (None: every child is a draw).

        Raises:
            ValueError: if ``tree.q_dist`` is None (a deterministic tree: use MultiRoundVerifier).
        """
        if tree.q_dist is None:
            raise ValueError(
                "MixedMultiRoundVerifier needs the draft distribution of the drawn children (tree.q_dist); for a "
                "tree of deterministic candidates use MultiRoundVerifier"
            )
        p = warp(target_logits, sampling, self.dtype)  # [N, V]
        q = tree.q_dist.to(device=p.device, dtype=self.dtype)  # [N, V]
        point_mass = tree.point_mass
        if point_mass is None:
            point_mass = torch.zeros(tree.num_nodes, dtype=torch.bool, device=tree.device)
        point_mass = point_mass.to(tree.device)
        native = native_plan(tree, p, q, point_mass, self.max_children)  # the same plan in one call on a CPU
        return native if native is not None else mixed_multiround_plan(tree, p, q, point_mass, self.max_children)


def mixed_multiround_plan(
    tree: DraftTree, p: torch.Tensor, q: torch.Tensor, point_mass: torch.Tensor, max_children: int | None = None
) -> VerifyPlan:
    """The mixed multi-round plan in closed form (see :class:`MixedMultiRoundVerifier`).

    Args:
        tree: ``N`` nodes, children in proposal order.
        p: ``[N, V]`` target distributions, row ``u`` for the children of ``u``.
        q: ``[N, V]`` draft distributions the drawn children of each node came from (rows without draws unused).
        point_mass: ``[N]`` bool, true for point-mass children (root entry unused).
        max_children: rounds to run (``None``: the widest sibling group, read from the tree).
    """
    n, vocab = p.shape
    idx = torch.arange(n, device=tree.device)
    parent = parent_index(tree)
    earlier = earlier_siblings(tree)  # [N, N]
    siblings = sibling_pairs(tree)  # [N, N]
    rank = earlier.sum(-1)  # [N] position among the siblings
    rounds = int(rank.max()) + 1 if max_children is None and n > 1 else min(max_children or 0, n - 1)
    child_at = torch.full((n, rounds + 1), -1, dtype=torch.long, device=tree.device)
    child_at[parent, torch.where((idx > 0) & (rank < rounds), rank, rounds)] = idx
    drawn = ~point_mass & (idx > 0)
    # Z before each draw: the q mass not drawn by an earlier sibling, as a sum of non-negative terms (no
    # cancellation): the mass no child carries, the draws from this one on, and each point-mass token no draw carries.
    same = tree.tokens[:, None] == tree.tokens[None, :]
    first = ~(earlier & same).any(-1)  # no earlier sibling carries this token
    carried_by_draw = (siblings & same & drawn[None, :]).any(-1)  # [N]: some drawn sibling carries this token
    q_sib = q[parent[:, None], tree.tokens[None, :]]  # [c, j] = q_{parent(c)}(x_j)
    untried_draws = siblings & ~earlier & drawn[None, :]
    point_only = siblings & (point_mass & first & ~carried_by_draw)[None, :]
    z_before = without_children(tree, q).sum(-1)[parent] + torch.where(untried_draws | point_only, q_sib, 0.0).sum(-1)
    q_own = q_sib.diagonal()  # [N] q_{parent(c)}(x_c)
    t = torch.zeros(n, dtype=p.dtype, device=p.device)  # per node as a parent
    accept_prob = torch.zeros_like(t)
    for k in range(rounds):
        # the parents with a k-th child (one host read): later rounds touch only their [V] rows, not all N of them
        par = (child_at[:, k] >= 0).nonzero().flatten()
        c = child_at[par, k]
        x = tree.tokens[c][:, None]
        if k == 0:  # p_0 = p: no pass over V
            own, r = p[par].gather(-1, x).squeeze(-1), torch.ones_like(t[par])
        else:
            rows = _rows(p[par], q[par], t[par], _children_tokens(tree, par, point_mass & (rank < k), vocab))
            own, r = rows.gather(-1, x).squeeze(-1), rows.sum(-1)
        z = z_before[c]
        a = torch.where(point_mass[c], safe_div(own, r), safe_div(own * z, r * q_own[c])).clamp(max=1.0)
        accept_prob = accept_prob.index_copy(0, c, a)
        t = t.index_copy(0, par, torch.where(point_mass[c], t[par], t[par] + safe_div(r, z)))
    accept_prob = torch.where(idx == 0, 1.0, accept_prob)
    every_point = point_mass & (idx > 0)

    def residual_at(nodes: torch.Tensor) -> torch.Tensor:
        """``nodes [...]`` -> ``[..., V]``: ``max(0, p m - t q)`` renormalised, or ``p`` where it is all zero."""
        flat = nodes.reshape(-1)
        tried = _children_tokens(tree, flat, every_point, vocab).reshape(*nodes.shape, vocab)
        rows = _rows(p[nodes], q[nodes], t[nodes], tried)
        total = rows.sum(-1, keepdim=True)
        return torch.where(total > 0, safe_div(rows, total), p[nodes])

    return VerifyPlan(accept_prob=accept_prob, residual_at=residual_at)


def _children_tokens(tree: DraftTree, nodes: torch.Tensor, select: torch.Tensor, vocab: int) -> torch.Tensor:
    """``[M, V]`` bool: row ``i`` marks the tokens of the ``select``-ed children of ``nodes[i]`` (``nodes [M]``)."""
    m, n = nodes.shape[0], tree.num_nodes
    hit = (tree.parents[None, :] == nodes[:, None]) & select[None, :]  # [M, N]
    rows = torch.arange(m, device=tree.device)[:, None].expand(m, n)
    return token_mask(rows.reshape(-1), tree.tokens.expand(m, n).reshape(-1), hit.reshape(-1), m, vocab)


def _rows(p: torch.Tensor, q: torch.Tensor, t: torch.Tensor, tried: torch.Tensor) -> torch.Tensor:
    """``max(0, p - t q)`` with the ``tried`` point-mass tokens zeroed: ``[..., V]``."""
    rows = torch.addcmul(p, t[..., None], q, value=-1.0).clamp_(min=0.0)
    return rows.masked_fill_(tried, 0.0)
