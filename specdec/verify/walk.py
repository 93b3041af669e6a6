"""The walk shared by every :class:`~specdec.verify.plan.PlanVerifier`: coins in, :class:`Verdict` out.

Semantics (the exact suite models precisely this): every non-root node ``c`` gets one uniform coin ``u[c]`` and is
*accepted* iff ``u[c] < accept_prob[c]``. At a reached node the walk moves to its lowest-index accepted child,
which is the same as trying the children in index order and stopping at the first acceptance: the coins of later
siblings are never looked at. When no child is accepted (or the node is a leaf) the walk stops there and draws
the bonus token from that node's residual. All coins are independent, so the probability of moving from ``u`` to
its ``k``-th child is ``prod_{j<k} (1 - a_j) * a_k`` with ``a = accept_prob``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from specdec.interfaces import Verdict
from specdec.sampling import sample
from specdec.tree import DraftTree

if TYPE_CHECKING:  # plan.py imports this module
    from specdec.verify.plan import VerifyPlan

__all__ = ["walk"]


def walk(tree: DraftTree, plan: VerifyPlan, generator: torch.Generator | None) -> Verdict:
    """Follow ``plan`` down ``tree`` with fresh coins; fixed shapes, no host sync.

    Args:
        tree: ``N`` nodes, ``tree.max_depth`` bounds the walk (one tensor step per level).
        plan: ``accept_prob [N]`` and ``residual [N, V]``.
        generator: the only source of randomness (``N`` uniforms, then one residual sample).

    Returns:
        :class:`Verdict` with ``accepted [max_depth + 1]`` (root first, ``-1`` padded), ``accept_length`` and
        ``bonus_token`` (0-dim long).
    """
    n = tree.num_nodes
    device = tree.device
    idx = torch.arange(n, device=device)
    coins = torch.rand(n, generator=generator, device=device, dtype=plan.accept_prob.dtype)
    accepted = coins < plan.accept_prob
    # Lowest accepted child of every node; ``n`` means "none".
    candidate = torch.where(accepted, idx, torch.full_like(idx, n))
    chosen = torch.full((n,), n, dtype=torch.long, device=device)
    chosen = chosen.scatter_reduce(0, tree.parents[1:], candidate[1:], reduce="amin", include_self=True)
    final = torch.zeros((), dtype=torch.long, device=device)
    for _ in range(tree.max_depth):
        nxt = chosen[final]
        final = torch.where(nxt < n, nxt, final)
    return Verdict(
        accepted=tree.paths[final],
        accept_length=tree.depth[final],
        bonus_token=sample(plan.residual[final], generator),
    )
