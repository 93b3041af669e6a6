"""Multi-round speculative sampling for candidates drawn without replacement (EAGLE-1 style trees)."""

from __future__ import annotations

import torch

from specdec.sampling import SamplingParams, warp
from specdec.tree import DraftTree
from specdec.verify.plan import PlanVerifier, VerifyPlan, earlier_siblings, parent_index, safe_div

__all__ = ["StochasticMultiRoundVerifier"]


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

    Args:
        dtype: dtype of the plan's probabilities.
        max_children: an upper bound on the number of children of any node (the number of rounds, one tensor step
            each). ``None`` uses ``N - 1``, always safe but slower for large trees. A bound below the true
            maximum drops the later candidates (never accepted; still lossless, but acceptance is wasted), so pass the
            policy's real width.
    """

    def __init__(self, dtype: torch.dtype = torch.float32, max_children: int | None = None) -> None:
        super().__init__(dtype)
        self.max_children = max_children

    # The three update rules, separate so that the negative controls in specdec.testing.broken can override one.
    def _accept(self, p_k: torch.Tensor, q_k: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``[M]`` ``min(1, p_k(x)/q_k(x))`` (0 where ``q_k(x) = 0``: such a candidate cannot have been drawn)."""
        p_x = p_k.gather(-1, x[:, None]).squeeze(-1)
        q_x = q_k.gather(-1, x[:, None]).squeeze(-1)
        return safe_div(p_x, q_x).clamp(max=1.0)

    def _next_p(self, p_k: torch.Tensor, q_k: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``[M, V]`` ``norm(max(0, p_k - q_k))``, or ``p_k`` where that is all zero."""
        r = (p_k - q_k).clamp(min=0.0)
        r_sum = r.sum(-1, keepdim=True)
        return torch.where(r_sum > 0, safe_div(r, r_sum), p_k)

    def _next_q(self, q_k: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``[M, V]`` ``q_k`` with ``x`` removed and renormalised (all zero once q is exhausted)."""
        q = q_k.scatter(-1, x[:, None], 0.0)
        return safe_div(q, q.sum(-1, keepdim=True))

    def plan(self, tree: DraftTree, target_logits: torch.Tensor, sampling: SamplingParams) -> VerifyPlan:
        """``accept_prob [N]`` and ``residual [N, V]`` from p = ``warp(target_logits)`` and ``q = tree.q_dist``.

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
        n = tree.num_nodes
        rounds = n - 1 if self.max_children is None else min(self.max_children, n - 1)
        idx = torch.arange(n, device=tree.device)
        rank = earlier_siblings(tree).sum(-1)  # [N] position of each node among its siblings
        # child_at[u, k] = the k-th child of u, -1 if none; column `rounds` absorbs the root and overflow.
        child_at = torch.full((n, rounds + 1), -1, dtype=torch.long, device=tree.device)
        col = torch.where((idx > 0) & (rank < rounds), rank, rounds)
        child_at[parent_index(tree), col] = idx
        # Siblings past `rounds` are never accepted (probability 0), so they are dropped, not half-used: the
        # bonus then comes from p_rounds, which keeps the output lossless (fewer candidates, same distribution).
        accept_prob = torch.zeros(n, dtype=self.dtype, device=tree.device)
        p_k, q_k = p, q
        for k in range(rounds):
            child = child_at[:, k]  # [N] the k-th child of every node (as a parent), -1 if none
            valid = child >= 0
            child = child.clamp(min=0)
            x = tree.tokens[child]
            a = self._accept(p_k, q_k, x)
            # Invalid rows write to the root's entry, which is reset below.
            accept_prob = accept_prob.scatter(0, torch.where(valid, child, 0), a)
            p_k = torch.where(valid[:, None], self._next_p(p_k, q_k, x), p_k)
            q_k = torch.where(valid[:, None], self._next_q(q_k, x), q_k)
        accept_prob = torch.where(idx == 0, 1.0, accept_prob)
        return VerifyPlan(accept_prob=accept_prob, residual=p_k)
