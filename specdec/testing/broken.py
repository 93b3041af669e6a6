"""Deliberately wrong verifiers: negative controls proving that the checks in this package can fail.

Each one is a realistic bug, close to a correct verifier, and states in its docstring exactly what is wrong.
Never use them for decoding.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from specdec.interfaces import Verdict
from specdec.sampling import SamplingParams, sample, warp
from specdec.target import HFTarget
from specdec.testing.exact import tree_on_cpu
from specdec.testing.reference import RoundByRoundStochasticVerifier
from specdec.testing.wrapped import WrappedVerifier
from specdec.tree import DraftTree
from specdec.trees.stochastic import StochasticTreePolicy
from specdec.verify.base import PlanVerifier
from specdec.verify.block import BlockVerifier
from specdec.verify.greedy import GreedyVerifier
from specdec.verify.mixed import MixedMultiRoundVerifier
from specdec.verify.multiround import MultiRoundVerifier, multiround_plan
from specdec.verify.plan import VerifyPlan, earlier_siblings, parent_index
from specdec.verify.stochastic import stochastic_multiround_plan
from specdec.verify.traversal import TraversalVerifier
from specdec.verify.walk import end_nodes

__all__ = [
    "BonusFromParentRowVerifier",
    "BlockFirstFailureVerifier",
    "BlockTokenResidualVerifier",
    "GreedyBonusOffByOneVerifier",
    "IgnoresQVerifier",
    "IndexOrderCompactionTarget",
    "OneSidedWarpVerifier",
    "OnlyZeroRejectedResidualVerifier",
    "PointMassAsDrawVerifier",
    "ResidualNotRenormalisedVerifier",
    "ReversedSiblingsVerifier",
    "SharedCoinsVerifier",
    "StaleQVerifier",
    "TraversalStaleQVerifier",
    "TraversalStaleWeightVerifier",
    "WrongTemperatureQVerifier",
    "PeekingGatePolicy",
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

    def _residual_at(
        self, owed: torch.Tensor, mass: torch.Tensor, p: torch.Tensor, q: torch.Tensor
    ) -> Callable[[torch.Tensor], torch.Tensor]:
        token_owed = (p[:-1] - q[:-1]).clamp(min=0.0)
        return super()._residual_at(token_owed, token_owed.sum(-1), p, q)


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


class WrongTemperatureQVerifier(RoundByRoundStochasticVerifier):
    """WRONG stochastic multi-round: judges the draws against q at temperature 1 while they were drawn at ``T``.

    The bug of a drafter or policy that samples children from ``softmax(z / T)`` but records ``softmax(z)``: the
    verifier's ``min(1, p/q)`` and residual ``max(0, p - q)`` then use a q the draws did not come from. Emulated
    here by undoing the temperature of the recorded rows, ``q_used ∝ q ** T``. At ``T = 1`` it is the correct rule.

    With ``exponent``: ``q_used ∝ q ** exponent`` at every temperature. ``exponent = r`` is the bug of a policy that
    draws at ``r x T`` (``StochasticTreePolicy(draft_temperature_ratio=r)``) and records the q at ``T``.
    """

    def __init__(
        self, dtype: torch.dtype = torch.float32, max_children: int | None = None, exponent: float | None = None
    ) -> None:
        super().__init__(dtype, max_children)
        self.exponent = exponent

    def plan(self, tree: DraftTree, target_logits: torch.Tensor, sampling: SamplingParams) -> VerifyPlan:
        """The correct round-by-round plan on ``tree`` with every ``q_dist`` row re-tempered (module docstring)."""
        if tree.q_dist is None:
            raise ValueError("WrongTemperatureQVerifier takes sampled candidates")
        power = sampling.temperature if self.exponent is None else self.exponent
        q = tree.q_dist.to(self.dtype).clamp(min=0.0) ** power
        q = q / q.sum(-1, keepdim=True).clamp(min=torch.finfo(self.dtype).tiny)
        return super().plan(dataclasses.replace(tree, q_dist=q), target_logits, sampling)


class _WrappedPlanVerifier(WrappedVerifier, PlanVerifier):
    """A control built around another plan verifier (``inner``): what it serves and reads is ``inner``'s."""

    def __init__(self, inner: PlanVerifier) -> None:
        PlanVerifier.__init__(self, inner.dtype)
        WrappedVerifier.__init__(self, inner)


class SharedCoinsVerifier(_WrappedPlanVerifier):
    """WRONG walk: one uniform coin per cycle is compared with every node's accept probability.

    The walk needs independent coins: with one shared ``u`` the events "accept ``c``" and "accept ``c'``" are
    nested (``u < a_c`` and ``u < a_c'``), so after accepting a node with a small ``a`` the next test always
    passes, and after rejecting a sibling with a large ``a`` the next sibling is always rejected. The plan is
    ``inner``'s, unchanged: only the coins are wrong, so a cycle with one test (a single child, or a root with no
    children) is unaffected. :meth:`stop_law` gives the exact law of where this walk stops, for the exact checks.
    """

    def plan(self, tree: DraftTree, target_logits: torch.Tensor, sampling: SamplingParams) -> VerifyPlan:
        return self.inner.plan(tree, target_logits, sampling)

    def verify(
        self, tree: DraftTree, target_logits: torch.Tensor, sampling: SamplingParams, generator: torch.Generator | None
    ) -> Verdict:
        plan = self.plan(tree, target_logits, sampling)
        coin = torch.rand((), generator=generator, device=tree.device, dtype=plan.accept_prob.dtype)
        final = end_nodes(tree, coin < plan.accept_prob)
        bonus = sample(plan.rows(final), generator) if plan.bonus is None else plan.bonus[final]
        return Verdict(accepted=tree.paths[final], accept_length=tree.depth[final], bonus_token=bonus)

    @staticmethod
    def stop_law(tree: DraftTree, plan: VerifyPlan) -> torch.Tensor:
        """``[N]`` float64: where the shared-coin walk stops. The coin's outcome only matters through which accept
        probabilities it falls below, so the law is a sum over the intervals between the sorted probabilities."""
        a = plan.accept_prob.detach().to("cpu", torch.float64).nan_to_num(0.0).clamp(0.0, 1.0)
        edges = torch.cat([torch.zeros(1, dtype=torch.float64), a[1:].unique(), torch.ones(1, dtype=torch.float64)])
        edges = edges.unique()  # sorted
        mids, widths = (edges[1:] + edges[:-1]) / 2, edges[1:] - edges[:-1]
        final = end_nodes(tree_on_cpu(tree), mids[:, None] < a[None, :])
        return torch.zeros(tree.num_nodes, dtype=torch.float64).index_add_(0, final, widths)


class BonusFromParentRowVerifier(_WrappedPlanVerifier):
    """WRONG bonus: when the walk stops at ``u`` it draws the bonus from the residual row of ``u``'s *parent*.

    An off-by-one between the accepted path and the rows of the target's logits (row ``u`` holds the target's
    distribution for ``u``'s children). At the root both agree (the root is its own "parent" here), so only
    cycles that accept at least one draft token are affected.
    """

    def plan(self, tree: DraftTree, target_logits: torch.Tensor, sampling: SamplingParams) -> VerifyPlan:
        correct = self.inner.plan(tree, target_logits, sampling)
        parent = parent_index(tree)  # the root's parent is the root

        def rows(nodes: torch.Tensor) -> torch.Tensor:
            return correct.rows(parent[nodes])

        return VerifyPlan(accept_prob=correct.accept_prob, residual_at=rows)


def reversed_sibling_order(tree: DraftTree) -> torch.Tensor:
    """``[N]`` long: ``order[new] = old``, the nodes renumbered level by level with every sibling group reversed
    (parents still before children)."""
    parents = tree.parents.tolist()
    children: dict[int, list[int]] = {}
    for c in range(1, tree.num_nodes):
        children.setdefault(parents[c], []).append(c)
    order, frontier = [0], [0]
    while frontier:
        frontier = [c for u in frontier for c in reversed(children.get(u, []))]
        order += frontier
    return torch.tensor(order, device=tree.device)


class ReversedSiblingsVerifier(_WrappedPlanVerifier):
    """WRONG child order: the plan judges each sibling group in reverse order, while the walk tries it in index order.

    The bug of a verifier that sorts or re-numbers the children (by score, by token id) without the walk following:
    child ``c``'s accept probability is computed given that its *later* siblings were rejected, but the walk uses it
    given that its *earlier* ones were. For sampled siblings the q updates (draws without replacement) run in the
    wrong order too. A node with one child is unaffected, so chains are.
    """

    def plan(self, tree: DraftTree, target_logits: torch.Tensor, sampling: SamplingParams) -> VerifyPlan:
        old = reversed_sibling_order(tree)  # old node id of each new id
        new = torch.empty_like(old).scatter_(0, old, torch.arange(old.numel(), device=old.device))
        parents = torch.where(tree.parents[old] >= 0, new[tree.parents[old].clamp(min=0)], -1)

        def pick(x: torch.Tensor | None) -> torch.Tensor | None:
            return None if x is None else x[old]

        permuted = DraftTree.from_parents(
            tree.tokens[old], parents, tree.max_depth, pick(tree.q_dist), pick(tree.q_cond), None, pick(tree.point_mass)
        )
        plan = self.inner.plan(permuted, target_logits[old], sampling)

        def rows(nodes: torch.Tensor) -> torch.Tensor:
            return plan.rows(new[nodes])

        return VerifyPlan(accept_prob=plan.accept_prob[new], residual_at=rows)


class PeekingGatePolicy(StochasticTreePolicy):
    """WRONG level gate: keeps the levels after the root's only where their first draw was a confident one.

    The bug of a gate that decides after looking at the level it decides about (the contract of
    :class:`~specdec.trees.level_gate.LevelGate`: a level is drawn or not from earlier draws only): the levels are
    drawn, then dropped unless the first child of the first expanded node has draft probability at least
    ``threshold``. Where they are kept, that child was in effect proposed from q cut to its confident tokens, while
    the verifier judges it against the whole q.
    """

    def __init__(self, shape, threshold: float = 0.3) -> None:
        super().__init__(shape)
        self.threshold = threshold

    def grow(self, drafter, root, sampling, generator, avoid=None) -> DraftTree:
        tree = super().grow(drafter, root, sampling, generator, avoid)
        if sampling.greedy:
            return tree
        m = 1 + self.shape.levels[0].width  # the root and its children
        if tree.num_nodes <= m:
            return tree
        first = int(tree.parents[m])
        if float(tree.q_dist[first, tree.tokens[m]]) >= self.threshold:
            return tree
        q_dist = tree.q_dist[:m].clone()
        q_dist[1:] = 0.0  # the root's children are leaves now
        return DraftTree.from_parents(
            tree.tokens[:m].clone(), tree.parents[:m].clone(), self.max_depth, q_dist, tree.q_cond[:m].clone()
        )
