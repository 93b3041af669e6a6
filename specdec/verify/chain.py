"""Speculative sampling on a chain (Leviathan et al. 2023; Chen et al. 2023)."""

from __future__ import annotations

import torch

from specdec.interfaces import TreeKind
from specdec.sampling import SamplingParams, warp
from specdec.tree import DraftTree
from specdec.verify.base import PlanVerifier
from specdec.verify.plan import VerifyPlan, has_children, parent_index, safe_div

__all__ = ["ChainVerifier", "chain_q"]


def chain_q(tree: DraftTree, p: torch.Tensor) -> torch.Tensor:
    """``[N, V]`` draft distributions of the children: ``tree.q_dist``, or one-hot at each deterministic candidate
    (``p`` gives shape, dtype and device)."""
    if tree.q_dist is None:  # deterministic candidate: q is one-hot at it
        return torch.zeros_like(p).index_put_((tree.parents[1:], tree.tokens[1:]), torch.ones_like(p[1:, 0]))
    return tree.q_dist.to(p.dtype)


class ChainVerifier(PlanVerifier):
    """Speculative sampling: accept ``x ~ q`` with probability ``min(1, p(x) / q(x))``, else resample.

    Contract: every node has at most one child (a chain), and the child ``x`` of node ``u`` was drawn from
    ``q = tree.q_dist[u]`` independently of the verifier's coins. If the tree is deterministic (``q_dist`` None),
    q is the one-hot of the candidate (the candidate is a function of the context).

    Why it is lossless (one step, then induction down the chain): with ``x ~ q``,
    ``P(emit y) = q(y) min(1, p(y)/q(y)) + (sum_x q(x) (1 - min(1, p(x)/q(x)))) r(y)`` where
    ``r = norm(max(0, p - q))``. The first term is ``min(q(y), p(y))``; the rejection mass is
    ``sum_x max(0, q(x) - p(x)) = sum_x max(0, p(x) - q(x))``, which is exactly the normaliser of ``r``, so the
    second term is ``max(0, p(y) - q(y))``. Their sum is ``p(y)``. Given an accepted ``y`` the walk continues with
    the child's own p, i.e. the target conditional on ``y``. If ``p == q`` nothing is ever rejected and ``r`` is
    never used (we fall back to ``p`` rather than divide by zero).

    Args:
        dtype: dtype of the plan's probabilities.
        check_chain: verify the chain contract (a host sync); turn off when the policy guarantees it.
    """

    def __init__(self, dtype: torch.dtype = torch.float32, check_chain: bool = True) -> None:
        super().__init__(dtype)
        self.check_chain = check_chain

    def refuses(self, kind: TreeKind, sampling: SamplingParams) -> str | None:
        if self.check_chain and not kind.chain:
            return f"{type(self).__name__} verifies chains only; the policy grows {kind.describe()}"
        return None

    def _check(self, tree: DraftTree) -> None:
        n = tree.num_nodes
        if self.check_chain and n > 1:
            expected = torch.arange(-1, n - 1, device=tree.device)
            if not bool((tree.parents == expected).all()):
                raise ValueError(
                    f"{type(self).__name__} needs a chain (every node at most one child); use a multi-round verifier"
                )

    def plan(self, tree: DraftTree, target_logits: torch.Tensor, sampling: SamplingParams) -> VerifyPlan:
        """``accept_prob [N]`` = ``min(1, p(x)/q(x))``; ``residual [N, V]`` = ``norm(max(0, p - q))`` (leaf: p).

        Raises:
            ValueError: if a node has more than one child (when ``check_chain``).
        """
        self._check(tree)
        n = tree.num_nodes
        p = warp(target_logits, sampling, self.dtype)  # [N, V] p_target for the children of each node
        parent = parent_index(tree)
        q = chain_q(tree, p)  # [N, V] q_draft of the child of each node
        p_x = p[parent, tree.tokens]  # [N] p(x) at each node's parent
        q_x = q[parent, tree.tokens]
        accept_prob = safe_div(p_x, q_x).clamp(max=1.0)
        accept_prob = torch.where(torch.arange(n, device=tree.device) == 0, 1.0, accept_prob)
        r = (p - q).clamp(min=0.0)
        r_sum = r.sum(-1, keepdim=True)
        r = torch.where(r_sum > 0, safe_div(r, r_sum), p)
        residual = torch.where(has_children(tree)[:, None], r, p)
        return VerifyPlan(accept_prob=accept_prob, residual=residual)
