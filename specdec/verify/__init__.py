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
* :class:`MixedMultiRoundVerifier`: draws beside point masses in one sibling group (composite drafters); each
  child is judged against the law it was proposed from.
* :class:`TraversalVerifier`: sampled candidates (or a chain); traversal verification (Weng et al. 2025) judges
  whole paths from the leaves up, in post-order; block verification on a chain.

At temperature 0 every one of them reduces to greedy because ``warp`` returns one-hot p. A generator with no pinned
verifier asks :func:`verifier_for` on every call; each verifier's ``refuses`` says which trees it serves.
"""

from __future__ import annotations

from specdec.interfaces import IncompatibleVerifierError, TreeKind, Verifier
from specdec.sampling import SamplingParams
from specdec.verify.base import PlanVerifier
from specdec.verify.block import BlockVerifier
from specdec.verify.chain import ChainVerifier
from specdec.verify.greedy import GreedyVerifier
from specdec.verify.mixed import MixedMultiRoundVerifier, mixed_multiround_plan
from specdec.verify.multiround import MultiRoundVerifier, multiround_plan
from specdec.verify.plan import VerifyPlan
from specdec.verify.stochastic import StochasticMultiRoundVerifier
from specdec.verify.traversal import TraversalVerifier
from specdec.verify.walk import walk

__all__ = [
    "BlockVerifier",
    "ChainVerifier",
    "GreedyVerifier",
    "MixedMultiRoundVerifier",
    "MultiRoundVerifier",
    "PlanVerifier",
    "StochasticMultiRoundVerifier",
    "TraversalVerifier",
    "VerifyPlan",
    "check_verifier",
    "mixed_multiround_plan",
    "multiround_plan",
    "verifier_for",
    "walk",
]


def verifier_for(kind: TreeKind, sampling: SamplingParams) -> PlanVerifier:
    """The verifier for trees of ``kind`` at ``sampling`` (float32 plans); what a generator uses when none is pinned.

    Temperature 0 -> :class:`GreedyVerifier` (lossless for any candidates, no coins needed); draws beside point
    masses -> :class:`MixedMultiRoundVerifier` (the only one that reads each child's own q); chains ->
    :class:`BlockVerifier` (never fewer accepted tokens in expectation than token-level or multi-round
    verification of a chain); sampled candidates -> :class:`StochasticMultiRoundVerifier` (one round per sibling
    rank, ``kind.max_children`` of them); deterministic candidates -> :class:`MultiRoundVerifier`.
    """
    if sampling.greedy:
        return GreedyVerifier()
    if kind.point_masses:
        return MixedMultiRoundVerifier(max_children=kind.max_children)
    if kind.chain:
        return BlockVerifier()
    if kind.sampled:
        return StochasticMultiRoundVerifier(max_children=kind.max_children)
    return MultiRoundVerifier()


def check_verifier(verifier: Verifier, kind: TreeKind, sampling: SamplingParams) -> None:
    """Raise :class:`~specdec.interfaces.IncompatibleVerifierError` if ``verifier`` cannot serve trees of ``kind`` at
    ``sampling``, naming the verifier that would."""
    reason = verifier.refuses(kind, sampling)
    if reason is None and kind.point_masses and not sampling.greedy and not verifier.reads_point_masses:
        reason = f"{type(verifier).__name__} takes every child for a draw from q; the policy grows {kind.describe()}"
    if reason is not None:
        fit = type(verifier_for(kind, sampling)).__name__
        raise IncompatibleVerifierError(
            f"{reason}. Leave the verifier unset so each call picks one (here: {fit}), or pin {fit}"
        )
