"""Deliberately wrong verifiers: negative controls proving that the checks in this package can fail.

Each one is a realistic bug, close to a correct verifier, and states in its docstring exactly what is wrong.
Never use them for decoding.
"""

from __future__ import annotations

import torch

from specdec.sampling import SamplingParams, warp
from specdec.target import HFTarget
from specdec.testing.reference import RoundByRoundStochasticVerifier
from specdec.tree import DraftTree
from specdec.verify.base import PlanVerifier
from specdec.verify.block import BlockVerifier
from specdec.verify.greedy import GreedyVerifier
from specdec.verify.mixed import MixedMultiRoundVerifier
from specdec.verify.multiround import MultiRoundVerifier, multiround_plan
from specdec.verify.plan import VerifyPlan, earlier_siblings, parent_index
from specdec.verify.stochastic import stochastic_multiround_plan
from specdec.verify.traversal import TraversalVerifier

__all__ = [
    "BlockFirstFailureVerifier",
    "BlockTokenResidualVerifier",
    "GreedyBonusOffByOneVerifier",
    "IgnoresQVerifier",
    "IndexOrderCompactionTarget",
    "OneSidedWarpVerifier",
    "OnlyZeroRejectedResidualVerifier",
    "PointMassAsDrawVerifier",
    "ResidualNotRenormalisedVerifier",
    "StaleQVerifier",
    "TraversalStaleQVerifier",
    "TraversalStaleWeightVerifier",
]


class ResidualNotRenormalisedVerifier(PlanVerifier):
    """WRONG multi-round (deterministic candidates): later siblings are accepted with the raw ``p(x_k)``.

    The correct probability is ``p(x_k) / (1 - sum of p over the earlier sibling tokens)``: the running residual
    must be renormalised after each rejection. Without it ``P(first token = x_2) = (1 - p(x_1)) p(x_2) < p(x_2)``
    and the missing mass goes to the bonus, so non-first candidates are under-produced. (Residual and duplicate
    handling are the correct ones; a single-child chain is therefore unaffected.)
    """

    def plan(self, tree: DraftTree, target_logits: torch.Tensor, sampling: SamplingParams) -> VerifyPlan:
        """Correct residual ``[N, V]``; ``accept_prob [N]`` = raw ``p_parent(x)`` (0 for a repeated token)."""
        p = warp(target_logits, sampling, self.dtype)
        correct = multiround_plan(tree, p)
        repeated = (earlier_siblings(tree) & (tree.tokens[:, None] == tree.tokens[None, :])).any(-1)
        raw = p[parent_index(tree), tree.tokens].masked_fill(repeated, 0.0)
        accept_prob = torch.where(torch.arange(tree.num_nodes, device=tree.device) == 0, 1.0, raw)
        return VerifyPlan(accept_prob=accept_prob, residual_at=correct.residual_at)


class GreedyBonusOffByOneVerifier(GreedyVerifier):
    """WRONG greedy: the point-mass ``bonus`` it names is the token after the argmax, not the argmax.

    Its ``residual`` rows are the correct one-hot argmax, so a check that reads only ``residual`` would pass it;
    the walk reads ``bonus`` and emits the wrong bonus token whenever the walk stops.
    """

    def plan(self, tree: DraftTree, target_logits: torch.Tensor, sampling: SamplingParams) -> VerifyPlan:
        """The correct greedy plan with ``bonus = (argmax + 1) mod V``."""
        correct = super().plan(tree, target_logits, sampling)
        wrong = (correct.bonus + 1) % correct.vocab
        return VerifyPlan(accept_prob=correct.accept_prob, residual=correct.residual_rows(), bonus=wrong)


class OnlyZeroRejectedResidualVerifier(RoundByRoundStochasticVerifier):
    """WRONG stochastic multi-round: after rejecting ``x`` the residual only zeroes ``x`` (the historical EAGLE bug).

    The correct update is ``p <- norm(max(0, p - q))``; zeroing only the rejected token and renormalising
    over-produces tokens with ``p < q`` (other than ``x``) and under-produces those with ``p > q``.
    Acceptance ``min(1, p/q)`` and the q update are the correct ones.
    """

    def _next_p(self, p_k: torch.Tensor, q_k: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        r = p_k.scatter(-1, x[:, None], 0.0)
        r_sum = r.sum(-1, keepdim=True)
        return torch.where(r_sum > 0, r / torch.where(r_sum > 0, r_sum, 1.0), p_k)


class IgnoresQVerifier(RoundByRoundStochasticVerifier):
    """WRONG stochastic multi-round: accepts sampled candidates as if q were one-hot, yet keeps the q residual.

    Acceptance is ``p_k(x_k)`` (the deterministic-candidate rule, "q one-hot") instead of
    ``min(1, p_k(x_k) / q_k(x_k))``, while rejections still update ``p <- norm(max(0, p - q))`` with the real q.
    The two halves no longer match: e.g. with ``p == q`` the residual is never reached by the correct rule, but
    here it is, and tokens are over-produced.

    Note: applying the one-hot rule *consistently* (accept ``p_k(x_k)``, residual zeroes the tried tokens, i.e.
    :class:`~specdec.verify.multiround.MultiRoundVerifier` with ``q_dist`` dropped) is lossless for candidates
    drawn independently of the coins, only wasteful, so it cannot serve as a negative control.
    """

    def _accept(self, p_k: torch.Tensor, q_k: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return p_k.gather(-1, x[:, None]).squeeze(-1)


class StaleQVerifier(RoundByRoundStochasticVerifier):
    """WRONG stochastic multi-round: forgets that siblings were drawn without replacement.

    Every sibling is judged against the parent's original ``q`` (minus nothing): the q update
    ``q <- q with x removed, renormalised`` is skipped, so the ratio ``p/q`` and the residual ``max(0, p - q)``
    of the second and later siblings use the wrong draft distribution. A single child per node is unaffected.
    """

    def _next_q(self, q_k: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return q_k


class OneSidedWarpVerifier(MultiRoundVerifier):
    """WRONG multi-round (deterministic candidates): accepts against ``softmax(logits)``, not the warped p.

    Temperature, top-k and top-p are applied to the residual (bonus) distribution but not to the acceptance
    probabilities, so the two sides disagree. At temperature 1 without top-k/top-p it coincides with
    :class:`~specdec.verify.multiround.MultiRoundVerifier`; anywhere else it is not lossless.
    """

    def plan(self, tree: DraftTree, target_logits: torch.Tensor, sampling: SamplingParams) -> VerifyPlan:
        """``accept_prob [N]`` from ``softmax(logits)``, ``residual [N, V]`` from ``warp(logits, sampling)``."""
        if tree.is_stochastic:
            raise ValueError("OneSidedWarpVerifier takes deterministic candidates")
        raw = torch.softmax(target_logits.to(self.dtype), dim=-1)
        warped = warp(target_logits, sampling, self.dtype)
        return VerifyPlan(
            accept_prob=multiround_plan(tree, raw).accept_prob,
            residual_at=multiround_plan(tree, warped).residual_at,
        )


class BlockFirstFailureVerifier(BlockVerifier):
    """WRONG block verification: stops at the *first* position whose test fails instead of keeping the last one
    that passes.

    The block thresholds ``h_i`` are computed correctly, but the path ends at ``τ = min{i : η_i > h_i} - 1``, i.e.
    ``P(τ = i) = h_1 ... h_i (1 - h_{i+1})``, which is token-level scanning with block thresholds. Those thresholds
    are calibrated for the backward rule, so prefixes are under- or over-produced.
    """

    def _stop_law(self, h: torch.Tensor) -> torch.Tensor:
        reach = torch.cumprod(h, 0)  # h_0 = 1: P(all of 1..i pass)
        return reach * torch.cat([1 - h[1:], h.new_ones(1)])


class BlockTokenResidualVerifier(BlockVerifier):
    """WRONG block verification: the block stop law with token-level residuals ``norm(max(0, p_τ - q_τ))``.

    The residual must be ``norm(max(0, P_τ p_τ - q_τ))``: after a prefix the draft has only partly paid for
    (``P_τ < 1``), the correction must favour the tokens the draft under-supplies relative to ``P_τ p``. With
    ``P_τ = 1`` both agree, so the bug only shows after a prefix whose ratios fell below 1.
    """

    def _residual(self, residual: torch.Tensor, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        owed = (p - q).clamp(min=0.0)
        mass = owed.sum(-1, keepdim=True)
        token = torch.where(mass > 0, owed / torch.where(mass > 0, mass, torch.ones_like(mass)), p)
        token[-1] = p[-1]
        return token


class TraversalStaleQVerifier(TraversalVerifier):
    """WRONG traversal verification: the parent's draft distribution keeps a deleted child's token.

    Siblings are draws *without replacement*: the next sibling came from ``s`` with the deleted token removed and
    renormalised. Keeping ``s`` judges it against the wrong proposal, so tokens are over- or under-produced as soon
    as a node has two or more sampled children (a chain never shows it: its nodes have one child each).
    """

    def _delete(
        self, weight: torch.Tensor, b: torch.Tensor, s: torch.Tensor, x: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        new_weight, new_b, _ = super()._delete(weight, b, s, x)
        return new_weight, new_b, s


class TraversalStaleWeightVerifier(TraversalVerifier):
    """WRONG traversal verification: a parent keeps its path weight ``P(u)`` after a child is deleted.

    After the subtree of a child is rejected, ``u`` must be accepted with ``Z / (Z + 1 - P(u))``, the share of the
    mass ``u`` still owes among the probability left; keeping ``P(u)`` under-accepts shallow prefixes whenever
    ``P(u) < 1`` (at the root ``P = 1`` and both agree).
    """

    def _delete(
        self, weight: torch.Tensor, b: torch.Tensor, s: torch.Tensor, x: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        _, new_b, new_s = super()._delete(weight, b, s, x)
        return weight, new_b, new_s


class PointMassAsDrawVerifier(MixedMultiRoundVerifier):
    """WRONG mixed multi-round: a point-mass child (a retrieval proposal) is judged as if it had been drawn from its
    parent's q, i.e. recorded with the EAGLE draft's q.

    The correct rule accepts the point mass ``x`` with ``p(x)`` and then zeroes ``x``; judged as a draw it is
    accepted with ``min(1, p(x) / q(x))`` (too often wherever ``q(x) < p(x) < 1``) and the residual subtracts
    ``q`` instead of ``delta(x)``, so the emitted law drifts toward the retrieval proposal.
    """

    def plan(self, tree: DraftTree, target_logits: torch.Tensor, sampling: SamplingParams) -> VerifyPlan:
        p = warp(target_logits, sampling, self.dtype)
        q = tree.q_dist.to(device=p.device, dtype=self.dtype)
        return stochastic_multiround_plan(tree, p, q, self.max_children)


class IndexOrderCompactionTarget(HFTarget):
    """WRONG target: on commit, keeps the cache entries of the first ``count`` tree nodes in index order instead of
    the accepted path's.

    On a chain the two agree (node ``i`` is at depth ``i``), and so they do whenever the accepted path happens to be
    nodes ``0, 1, .., k``; as soon as a later sibling is accepted, the next cycles attend to the keys and values of
    tokens that were never emitted. Every later token is drawn from the wrong conditional.
    """

    def commit(self, accepted: torch.Tensor, count: int) -> None:
        super().commit(torch.arange(accepted.shape[0], device=accepted.device), count)
