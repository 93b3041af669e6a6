"""Verifiers: pure functions from (tree, target logits, sampling, coins) to a :class:`~specdec.interfaces.Verdict`.

Every verifier is a :class:`PlanVerifier`: it computes a :class:`VerifyPlan` (accept probabilities and residual
distributions, tensor ops only) and hands it to the shared :func:`walk`. Which one to use:

* :class:`GreedyVerifier`: temperature 0, any candidates; accept iff the token is the target argmax.
* :class:`ChainVerifier`: a chain of sampled (or deterministic) candidates; speculative sampling ``min(1, p/q)``.
* :class:`BlockVerifier`: a chain; block verification (Sun et al. 2025) keeps the longest prefix that passes as a
  whole, never fewer tokens in expectation than :class:`ChainVerifier`.
* :class:`MultiRoundVerifier`: deterministic candidates (top-k trees: EAGLE-2/3, HASS); accept ``x`` with
  probability ``p(x)`` under the running residual.
* :class:`StochasticMultiRoundVerifier`: candidates sampled without replacement (EAGLE-1); ``min(1, p/q)``,
  then ``p <- norm(max(0, p - q))`` and ``q`` loses the rejected token.
* :class:`TraversalVerifier`: sampled candidates (or a chain); traversal verification (Weng et al. 2025) judges
  whole paths from the leaves up, in post-order; block verification on a chain.

At temperature 0 every one of them reduces to greedy because ``warp`` returns one-hot p.
"""

from __future__ import annotations

from specdec.verify.block import BlockVerifier
from specdec.verify.chain import ChainVerifier
from specdec.verify.greedy import GreedyVerifier
from specdec.verify.multiround import MultiRoundVerifier, multiround_plan
from specdec.verify.plan import PlanVerifier, VerifyPlan
from specdec.verify.stochastic import StochasticMultiRoundVerifier
from specdec.verify.traversal import TraversalVerifier
from specdec.verify.walk import walk

__all__ = [
    "BlockVerifier",
    "ChainVerifier",
    "GreedyVerifier",
    "MultiRoundVerifier",
    "PlanVerifier",
    "StochasticMultiRoundVerifier",
    "TraversalVerifier",
    "VerifyPlan",
    "default_verifier",
    "multiround_plan",
    "walk",
]


def default_verifier(
    tree_is_stochastic: bool, temperature: float, max_children: int | None = None, chain: bool = False
) -> PlanVerifier:
    """The verifier to use for a tree policy and temperature (float32 plans).

    Temperature 0 -> :class:`GreedyVerifier` (lossless for any candidates, no coins needed); chains ->
    :class:`BlockVerifier` (never fewer accepted tokens in expectation than token-level or multi-round
    verification of a chain); sampled candidates -> :class:`StochasticMultiRoundVerifier`; deterministic
    candidates -> :class:`MultiRoundVerifier`.

    Args:
        tree_is_stochastic: the policy samples its candidates (fills ``q_dist``).
        temperature: the sampling temperature.
        max_children: for sampled candidates, the most children any node of the policy's trees has (the
            stochastic verifier runs one round per sibling rank). ``None`` reads the widest sibling group from each
            tree (one host read per plan). Must not be below the true maximum (candidates past it would be dropped).
        chain: every tree of the policy is a chain (at most one child per node).
    """
    if temperature == 0:
        return GreedyVerifier()
    if chain:
        return BlockVerifier()
    if tree_is_stochastic:
        return StochasticMultiRoundVerifier(max_children=max_children)
    return MultiRoundVerifier()
