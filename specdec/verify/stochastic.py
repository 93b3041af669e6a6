"""Multi-round speculative sampling for candidates drawn without replacement (EAGLE-1 style trees)."""

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
    without_children,
)

__all__ = ["StochasticMultiRoundVerifier", "stochastic_multiround_plan"]


class StochasticMultiRoundVerifier(PlanVerifier):
    """Multi-round speculative sampling (SpecInfer / EAGLE-1) on candidates drawn without replacement from q.

    At a node ``u`` with children ``x_1 .. x_K`` (index order = draw order), start from ``p_0 = p_u`` and
    ``q_0 = q_dist[u]``, and for ``k = 1 .. K``:

    * accept ``x_k`` with probability ``min(1, p_{k-1}(x_k) / q_{k-1}(x_k))``;
    * on rejection ``p_k = norm(max(0, p_{k-1} - q_{k-1}))`` and ``q_k`` = ``q_{k-1}`` with ``x_k`` removed and
      renormalised (the next candidate was drawn without replacement).

    If all are rejected the bonus is drawn from ``p_K`` (a leaf's from ``p_u``). When ``max(0, p - q)`` sums to 0
    we keep ``p``: then ``p == q`` and the candidate is accepted with probability 1, so that state is never reached.

    Contract: ``tree.q_dist[u]`` is the distribution the children of ``u`` were drawn from, in sibling order,
    without replacement, independently of this verifier's coins.

    Why it is lossless (induction on the number of remaining candidates ``m``). Claim: if the candidates
    ``x_k, .., x_K`` are drawn without replacement from ``q_{k-1}``, the procedure started at round ``k`` with
    ``(p_{k-1}, q_{k-1})`` emits a first token distributed as ``p_{k-1}``. ``m = 0``: the bonus is drawn from
    ``p_{k-1}``. Step: ``x_k ~ q_{k-1}`` is accepted with ``min(1, p/q)``, contributing ``min(p(y), q(y))`` to
    ``P(y)``, and rejected with total probability ``Z = sum max(0, q - p) = sum max(0, p - q)``. Given that
    ``x_k = x`` was drawn and rejected, the remaining candidates are drawn without replacement from ``q`` with
    ``x`` removed, i.e. from ``q_k``, and by induction the rest emits ``~ p_k = max(0, p - q) / Z`` *whatever*
    ``x`` was; so the rejection branch contributes ``Z p_k(y) = max(0, p(y) - q(y))``, and
    ``min(p, q) + max(0, p - q) = p``. Removing ``x`` from ``q`` loses nothing: ``x`` was rejected with positive
    probability only if ``p(x) < q(x)``, so ``p_k(x) = 0`` and ``x`` could never be accepted again anyway.
    Given the accepted child, the walk continues in its subtree with that child's own ``(p, q)``, so by induction
    over depth the emitted sequence follows the target process.

    How it runs (closed form; :class:`~specdec.testing.reference.RoundByRoundStochasticVerifier` is the rounds
    above, one ``[N, V]`` state per round, kept as the oracle the tests compare against). After rejections at rounds
    ``1 .. k``, in every state reached with positive probability,

    ``p_k = max(0, p - t_k q) / R_k``,  ``R_k = sum_y max(0, p(y) - t_k q(y))``,  ``t_0 = 0``,
    ``t_{k+1} = t_k + R_k / Z_k``,  ``Z_k = 1 - q(x_1) - .. - q(x_k)`` (the mass of q not drawn yet).

    Induction: ``p_k - q_k = (max(0, p - t_k q) / R_k) - q / Z_k`` on the tokens not drawn; where ``p > t_k q`` that
    is ``(p - t_{k+1} q) / R_k``, elsewhere it is negative, and ``p - t_{k+1} q < 0`` there too, so its positive
    part is ``max(0, p - t_{k+1} q) / R_k``. A drawn token ``x_j`` was rejected with positive probability only if
    ``p_{j-1}(x_j) < q_{j-1}(x_j)``, i.e. ``p(x_j) < t_j q(x_j) <= t_k q(x_j)``: its term is 0 on both sides.
    So a node's plan is one number ``t`` per round: the accept probability of the ``(k+1)``-th child is
    ``min(1, max(0, p(x) - t_k q(x)) Z_k / (R_k q(x)))`` and the bonus row ``max(0, p - t_K q) / R_K``. Cost: one
    pass over ``[N, V]`` per round after the first (``R``), two for the masses ``Z`` (kept as sums of non-negative
    terms: the mass no child carries plus the untried siblings', which cannot cancel), and the walk builds the one
    bonus row it samples from (``residual_at``). Rows whose ``R`` is 0 (``p = q`` on the tried set: the candidate
    before was accepted with probability 1, so the state is never reached) keep ``p`` as their bonus row.

    Args:
        dtype: dtype of the plan's probabilities.
        max_children: an upper bound on the number of children of any node (the number of rounds, one tensor step
            each). ``None`` reads the widest sibling group from the tree (one host read). A bound below the true
            maximum drops the later candidates (never accepted; still lossless, but acceptance is wasted), so pass
            the policy's real width.
    """

    def __init__(self, dtype: torch.dtype = torch.float32, max_children: int | None = None) -> None:
        super().__init__(dtype)
        self.max_children = max_children

    def refuses(self, kind: TreeKind, sampling: SamplingParams) -> str | None:
        if not kind.sampled:
            at = " at temperature 0" if sampling.greedy else ""
            return f"StochasticMultiRoundVerifier needs sampled candidates; the policy grows {kind.describe()}{at}"
        return None

    def plan(self, tree: DraftTree, target_logits: torch.Tensor, sampling: SamplingParams) -> VerifyPlan:
        """``accept_prob [N]`` and the residual rows (``residual_at``) from p = ``warp(target_logits)`` and
        ``q = tree.q_dist``.

        Raises:
            ValueError: if ``tree.q_dist`` is None (deterministic candidates).
        """
        if tree.q_dist is None:
            raise ValueError(
                "StochasticMultiRoundVerifier needs sampled candidates with their draft distribution (tree.q_dist); "
                "for deterministic candidates use MultiRoundVerifier"
            )
        p = warp(target_logits, sampling, self.dtype)  # [N, V] p_target at each node (as a parent)
        q = tree.q_dist.to(device=p.device, dtype=self.dtype)  # [N, V] q_draft at each node (as a parent)
        native = native_plan(tree, p, q, max_children=self.max_children)  # the same law in one call on a CPU
        return native if native is not None else stochastic_multiround_plan(tree, p, q, self.max_children)


def stochastic_multiround_plan(
    tree: DraftTree, p: torch.Tensor, q: torch.Tensor, max_children: int | None = None
) -> VerifyPlan:
    """The multi-round plan for sampled candidates, in closed form (see :class:`StochasticMultiRoundVerifier`).

    Args:
        tree: ``N`` nodes; each node's children are draws without replacement from its ``q`` row, in index order.
        p: ``[N, V]`` target distributions, row ``u`` for the children of ``u``.
        q: ``[N, V]`` draft distributions, row ``u`` for the children of ``u``.
        max_children: rounds to run (``None``: the widest sibling group, read from the tree).
    """
    n = tree.num_nodes
    idx = torch.arange(n, device=tree.device)
    parent = parent_index(tree)
    earlier = earlier_siblings(tree)  # [N, N]
    rank = earlier.sum(-1)  # [N] draw order among the siblings
    # the widest sibling group (one host read), unless the caller bounds the rounds
    rounds = int(rank.max()) + 1 if max_children is None and n > 1 else min(max_children or 0, n - 1)
    # child_at[u, k] = the k-th child of u, -1 if none; column `rounds` absorbs the root and overflow.
    child_at = torch.full((n, rounds + 1), -1, dtype=torch.long, device=tree.device)
    child_at[parent, torch.where((idx > 0) & (rank < rounds), rank, rounds)] = idx
    # Z before each child: the q mass no child carries + the q of the siblings from this one on (no cancellation).
    rest_sum = without_children(tree, q).sum(-1)  # [N]
    q_sib = q[parent[:, None], tree.tokens[None, :]]  # [c, j] = q_{parent(c)}(x_j)
    untried = torch.where(sibling_pairs(tree) & ~earlier, q_sib, 0.0).sum(-1)  # [N]: this sibling and later ones
    z_before = rest_sum[parent] + untried  # [N], indexed by child
    q_own = q_sib.diagonal()  # [N] q_{parent(c)}(x_c)
    t = torch.zeros(n, dtype=p.dtype, device=p.device)  # per node as a parent
    r = torch.ones_like(t)  # R_k, per node as a parent
    z = torch.ones_like(t)  # Z_0 = 1: round 1 judges against q as given, as the rule does
    rows = p  # max(0, p - t q) per node as a parent: the candidate's numerator is read from the row R sums
    accept_prob = torch.zeros_like(t)
    for k in range(rounds):
        child = child_at[:, k]  # [N] the k-th child of every node (as a parent), -1 if none
        valid = child >= 0
        c = child.clamp(min=0)
        if k:
            z = z_before[c]
        a = safe_div(rows.gather(-1, tree.tokens[c][:, None]).squeeze(-1) * z, r * q_own[c]).clamp(max=1.0)
        # Invalid rows write to the root's entry, which is reset below.
        accept_prob = accept_prob.scatter(0, torch.where(valid, c, 0), a)
        t = torch.where(valid, t + safe_div(r, z), t)
        if k + 1 < rounds:  # R for the next round's candidates (the last one's R is built with the bonus rows)
            rows = torch.addcmul(p, t[:, None], q, value=-1.0).clamp_(min=0.0)
            r = torch.where(valid, rows.sum(-1), r)
    accept_prob = torch.where(idx == 0, 1.0, accept_prob)

    def residual_at(nodes: torch.Tensor) -> torch.Tensor:
        """``nodes [...]`` -> ``[..., V]``: ``max(0, p - t q)`` renormalised, or ``p`` where it is all zero."""
        rows = torch.addcmul(p[nodes], t[nodes][..., None], q[nodes], value=-1.0).clamp_(min=0.0)
        total = rows.sum(-1, keepdim=True)
        return torch.where(total > 0, safe_div(rows, total), p[nodes])

    return VerifyPlan(accept_prob=accept_prob, residual_at=residual_at)
