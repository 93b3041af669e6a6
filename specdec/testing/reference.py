"""Reference forms of verifiers whose library plan is a closed form: the rules as the papers state them, kept as
oracles for the tests and as the base of the negative controls in :mod:`specdec.testing.broken`.

Slow on purpose: they carry the whole ``[N, V]`` state through every round. Never use them for decoding.
"""

from __future__ import annotations

import torch

from specdec.sampling import SamplingParams, warp
from specdec.tree import DraftTree
from specdec.verify.base import PlanVerifier
from specdec.verify.plan import VerifyPlan, earlier_siblings, parent_index, safe_div

__all__ = ["RoundByRoundStochasticVerifier"]


class RoundByRoundStochasticVerifier(PlanVerifier):
    """Multi-round speculative sampling on sampled candidates, round by round (SpecInfer / EAGLE-1).

    The rule of :class:`~specdec.verify.stochastic.StochasticMultiRoundVerifier` (whose docstring has the proof) as
    written there: at a node with children ``x_1 .. x_K``, ``p_0 = p_u``, ``q_0 = q_u``; accept ``x_k`` with
    ``min(1, p_{k-1}(x_k) / q_{k-1}(x_k))``; on rejection ``p_k = norm(max(0, p_{k-1} - q_{k-1}))`` (``p_{k-1}``
    where that is all zero) and ``q_k`` = ``q_{k-1}`` without ``x_k``, renormalised. The bonus row is ``p_K``.

    Args:
        dtype: dtype of the plan's probabilities.
        max_children: rounds to run (``None``: ``N - 1``).
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
        """``accept_prob [N]`` and ``residual [N, V]`` from p = ``warp(target_logits)`` and ``q = tree.q_dist``."""
        if tree.q_dist is None:
            raise ValueError("RoundByRoundStochasticVerifier needs sampled candidates (tree.q_dist)")
        p = warp(target_logits, sampling, self.dtype)  # [N, V]
        q = tree.q_dist.to(device=p.device, dtype=self.dtype)  # [N, V]
        n = tree.num_nodes
        rounds = n - 1 if self.max_children is None else min(self.max_children, n - 1)
        idx = torch.arange(n, device=tree.device)
        rank = earlier_siblings(tree).sum(-1)  # [N] position of each node among its siblings
        child_at = torch.full((n, rounds + 1), -1, dtype=torch.long, device=tree.device)
        child_at[parent_index(tree), torch.where((idx > 0) & (rank < rounds), rank, rounds)] = idx
        accept_prob = torch.zeros(n, dtype=self.dtype, device=tree.device)
        p_k, q_k = p, q
        for k in range(rounds):
            child = child_at[:, k]  # [N] the k-th child of every node (as a parent), -1 if none
            valid = child >= 0
            child = child.clamp(min=0)
            x = tree.tokens[child]
            accept_prob = accept_prob.scatter(0, torch.where(valid, child, 0), self._accept(p_k, q_k, x))
            p_k = torch.where(valid[:, None], self._next_p(p_k, q_k, x), p_k)
            q_k = torch.where(valid[:, None], self._next_q(q_k, x), q_k)
        accept_prob = torch.where(idx == 0, 1.0, accept_prob)
        return VerifyPlan(accept_prob=accept_prob, residual=p_k)
