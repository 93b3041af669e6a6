"""Traversal verification of a sampled tree (Weng et al., "Traversal Verification for Speculative Tree Decoding",
NeurIPS 2025, arXiv 2505.12398)."""

from __future__ import annotations

import torch

from specdec.interfaces import TreeKind
from specdec.sampling import SamplingParams, warp
from specdec.tree import DraftTree
from specdec.verify.base import PlanVerifier
from specdec.verify.chain import chain_q
from specdec.verify.plan import VerifyPlan, safe_div

__all__ = ["TraversalVerifier"]


class TraversalVerifier(PlanVerifier):
    """Traversal verification: judge whole paths from the leaves up, in post-order, until one is accepted.

    Token-level tree verification (:class:`~specdec.verify.stochastic.StochasticMultiRoundVerifier`) walks down
    from the root and discards a whole subtree as soon as its root is rejected. Traversal verification walks the
    tree in post-order (the first leaf of a depth-first scan, then its siblings, then their parent, ...) and asks
    of each node ``v`` whether the *path* root -> ``v`` is accepted as a whole; a rejected node is deleted, its
    parent's distributions are updated, and the scan goes on. On a chain it is block verification
    (:class:`~specdec.verify.block.BlockVerifier`), which never accepts fewer tokens in expectation than
    token-level verification (Theorem 2 of the block paper; the traversal paper's optimality on chains).

    State per node ``u`` while the scan runs: the sequence-level acceptance weight ``P(u)``, the target
    distribution ``b_u`` and the draft distribution ``s_u`` of ``u``'s children. Initially ``b_u = p_u``,
    ``s_u = q_u = tree.q_dist[u]``, ``P(root) = 1`` and, top-down, ``P(c) = min(1, P(u) b_u(x_c) / s_u(x_c))``
    for a child ``c`` of ``u`` carrying token ``x_c``. Then, in post-order (children in index order = draw
    order, a node after all of its children):

    * node ``v`` (all of its children deleted) is accepted with probability ``P(v)``; the emitted tokens are the
      path root -> ``v`` and a bonus drawn from ``b_v``;
    * otherwise ``v`` is deleted and its parent ``u`` updated (``Z = sum_x max(0, P(u) b_u(x) - s_u(x))``):
      ``b_u <- max(0, P(u) b_u - s_u) / Z``, ``P(u) <- Z / (Z + 1 - P(u))``, ``s_u <- s_u`` without ``x_v``,
      renormalised (the next sibling was drawn without replacement); the weights ``P`` of ``u``'s remaining
      subtrees are recomputed top-down from the new ``(P(u), b_u, s_u)`` before the scan enters them.

    The root ends the scan with ``P(root) = 1``: if everything was deleted the bonus is drawn from ``b_root``.

    Why it is lossless (induction; the exact suite also checks it in float64 on hypothesis-generated trees, p, q
    and warpers). Claim: if ``u`` has weight ``P``, state ``(b, s)`` and its remaining children are draws without
    replacement from ``s``, then for every token ``y`` the scan ends in ``u``'s subtree having emitted ``y`` right
    after ``u`` with probability ``P b(y)``, and the tokens after ``y`` follow the target process. No children
    left: ``u`` is accepted with probability ``P`` and the bonus is drawn from ``b``. Otherwise the next child is
    ``x ~ s`` with weight ``w_x = min(1, P b(x) / s(x))`` and a fresh state of its own, so by the claim for it
    (induction on depth) its subtree ends with probability ``w_x`` having emitted ``x``: ``y`` gains
    ``s(y) w_y = min(s(y), P b(y))``. It is rejected with probability ``sum_x s(x) (1 - w_x) = 1 - P + Z``, after
    which ``u`` has state ``(P', b', s without x)`` whatever ``x`` was, and by the claim for one child fewer the
    rest of the scan adds ``(1 - P + Z) P' b'(y) = max(0, P b(y) - s(y))``. The sum is ``P b(y)``. (A child with
    ``P b(x) >= s(x)`` has ``w_x = 1`` and is never rejected, so removing ``x`` from ``s`` loses nothing.) At the
    root ``P = 1`` and ``b = p``: the first token follows ``p`` and, by the claim, so does everything after it.

    Benefit: on a chain this is block verification, never worse than token-level verification. On trees it is
    better on average in our exact comparisons, but not on every tree (``tests/test_verify_exact.py`` keeps a
    counterexample), so :func:`~specdec.verify.verifier_for` does not pick it for trees.

    How it runs: the scan is a fixed sequence of ``(node, acceptance probability)`` pairs (the order is the
    post-order, and every update is deterministic given that the earlier nodes were rejected), so the law of
    the end node is ``P(end = v_i) = a_i prod_{j < i} (1 - a_j)``; :meth:`VerifyPlan.from_stop_probs` turns that
    law into the shared walk's plan. Plan cost: ``O(N)`` vector ops of width ``V`` and one host read of the
    tree's shape.

    Contract: every node's children were drawn in index order, without replacement, from ``tree.q_dist[u]``,
    independently of the verifier's coins (:class:`~specdec.trees.stochastic.StochasticTreePolicy`), or the
    tree is a chain (a deterministic chain has one-hot q, as for :class:`~specdec.verify.chain.ChainVerifier`).
    At temperature 0, p is one-hot and the rule reduces to greedy.

    Raises ValueError on a deterministic tree with more than one child at a node (top-k candidates carry no q).
    """

    def refuses(self, kind: TreeKind, sampling: SamplingParams) -> str | None:
        if not (kind.sampled or kind.chain):
            return f"TraversalVerifier needs sampled candidates or a chain; the policy grows {kind.describe()}"
        return None

    def plan(self, tree: DraftTree, target_logits: torch.Tensor, sampling: SamplingParams) -> VerifyPlan:
        """Post-order scan (see the class docstring); ``stop law [N]`` -> ``accept_prob [N]``, ``residual [N, V]``."""
        n = tree.num_nodes
        parents = tree.parents.tolist()  # the tree's shape, read once
        children: list[list[int]] = [[] for _ in range(n)]
        for c in range(1, n):
            children[parents[c]].append(c)
        if tree.q_dist is None and any(len(c) > 1 for c in children):
            raise ValueError(
                "TraversalVerifier needs sampled candidates with their draft distribution (tree.q_dist) or a chain; "
                "for deterministic top-k candidates use MultiRoundVerifier"
            )
        p = warp(target_logits, sampling, self.dtype)  # [N, V]: p_u
        q = chain_q(tree, p)  # [N, V]: q_u (rows of leaves unused)
        tokens = tree.tokens.tolist()
        one = torch.ones((), dtype=p.dtype, device=p.device)
        accept: list[torch.Tensor] = [one] * n  # a_v: P(v) when the scan reaches v
        residual = p.clone()
        order: list[int] = []  # post-order

        def scan(u: int, weight: torch.Tensor) -> torch.Tensor:
            b, s = p[u], q[u]
            for c in children[u]:
                x = tokens[c]
                accept[c] = scan(c, torch.clamp(weight * safe_div(b[x], s[x]), max=1.0))
                order.append(c)
                weight, b, s = self._delete(weight, b, s, x)
            residual[u] = b
            return weight

        scan(0, one)
        order.append(0)
        a = torch.stack([accept[v] for v in order])  # [N] in post-order; the root's is 1
        rejected_before = torch.cumprod(torch.cat([one[None], 1 - a[:-1]]), 0)
        stop = torch.zeros(n, dtype=p.dtype, device=p.device)
        stop[torch.tensor(order, device=p.device)] = a * rejected_before
        return VerifyPlan.from_stop_probs(tree, stop, residual)

    def _delete(
        self, weight: torch.Tensor, b: torch.Tensor, s: torch.Tensor, x: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The parent's ``(P, b, s)`` after its child with token ``x`` was rejected (see the class docstring)."""
        owed = (weight * b - s).clamp(min=0.0)  # [V]
        mass = owed.sum()  # Z
        denom = mass + (1.0 - weight)
        new_weight = torch.where(denom > 0, safe_div(mass, denom), torch.ones_like(mass))
        new_b = torch.where(mass > 0, safe_div(owed, mass), b)
        s = s.clone()
        s[x] = 0.0
        return new_weight, new_b, safe_div(s, s.sum())
