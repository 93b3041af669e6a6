"""The walk shared by every :class:`~specdec.verify.base.PlanVerifier`: coins in, :class:`Verdict` out.

Semantics: every non-root node ``c`` gets one uniform coin ``u[c]`` and is *accepted* iff
``u[c] < accept_prob[c]``. At a reached node the walk moves to its lowest-index accepted child, which is the same as
trying the children in index order and stopping at the first acceptance: the coins of later siblings are never
looked at. When no child is accepted (or the node is a leaf) the walk stops there and draws the bonus token from
that node's residual. All coins are independent, so the probability of moving from ``u`` to its ``k``-th child is
``prod_{j<k} (1 - a_j) * a_k`` with ``a = accept_prob``. The exact suite enumerates the coins' outcomes through
:func:`end_nodes`, the deterministic half of the walk, rather than modelling it a second time.
"""

from __future__ import annotations

import torch

from specdec.interfaces import Verdict
from specdec.sampling import sample
from specdec.tree import DraftTree
from specdec.verify.plan import VerifyPlan

__all__ = ["end_nodes", "walk"]


def walk(tree: DraftTree, plan: VerifyPlan, generator: torch.Generator | None) -> Verdict:
    """Follow ``plan`` down ``tree`` with fresh coins; fixed shapes, no host sync.

    Args:
        tree: ``N`` nodes, ``tree.max_depth`` bounds the walk (one tensor step per level).
        plan: ``accept_prob [N]`` and the residual rows (:meth:`VerifyPlan.rows`), or point-mass ``bonus [N]``.
        generator: the only source of randomness (``N`` uniforms, then one residual sample unless the plan gives
            point-mass ``bonus`` tokens).

    Returns:
        :class:`Verdict` with ``accepted [max_depth + 1]`` (root first, ``-1`` padded), ``accept_length`` and
        ``bonus_token`` (0-dim long).
    """
    coins = torch.rand(tree.num_nodes, generator=generator, device=tree.device, dtype=plan.accept_prob.dtype)
    final = end_nodes(tree, coins < plan.accept_prob)
    return Verdict(
        accepted=tree.paths[final],
        accept_length=tree.depth[final],
        bonus_token=sample(plan.rows(final), generator) if plan.bonus is None else plan.bonus[final],
    )


def end_nodes(tree: DraftTree, accepted: torch.Tensor) -> torch.Tensor:
    """Where the walk stops, given which nodes' coins came up "accept" (the deterministic half of :func:`walk`).

    The exact suite (:func:`specdec.testing.exact.stop_probabilities`) enumerates every outcome of the coins through
    this same function, so a bug here is caught exactly, not only statistically.

    Args:
        tree: ``N`` nodes.
        accepted: ``[..., N]`` bool, ``accepted[..., c]`` iff node ``c``'s coin is below its accept probability
            (the root's entry is ignored).

    Returns:
        ``[...]`` long: the node where the walk stops (it moves to the lowest accepted child, ``tree.max_depth``
        levels at most).
    """
    n = tree.num_nodes
    batch = accepted.shape[:-1]
    flags = accepted.reshape(-1, n)
    idx = torch.arange(n, device=tree.device)
    # Lowest accepted child of every node; ``n`` means "none".
    candidate = torch.where(flags, idx, torch.full_like(idx, n))[:, 1:]
    chosen = torch.full_like(flags, n, dtype=torch.long)
    chosen = chosen.scatter_reduce(
        1, tree.parents[1:].expand_as(candidate), candidate, reduce="amin", include_self=True
    )
    final = torch.zeros(flags.shape[0], dtype=torch.long, device=tree.device)
    for _ in range(tree.max_depth):
        nxt = chosen.gather(1, final[:, None]).squeeze(1)
        final = torch.where(nxt < n, nxt, final)
    return final.reshape(batch)
