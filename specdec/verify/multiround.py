"""Multi-round verification of deterministic candidates (EAGLE-2 / EAGLE-3 / HASS at temperature > 0)."""

from __future__ import annotations

import torch

from specdec.interfaces import TreeKind
from specdec.sampling import SamplingParams, warp
from specdec.tree import DraftTree
from specdec.verify.base import PlanVerifier
from specdec.verify.plan import (
    VerifyPlan,
    earlier_siblings,
    parent_index,
    safe_div,
    sibling_pairs,
    without_children,
)

__all__ = ["MultiRoundVerifier", "multiround_plan"]


def multiround_plan(tree: DraftTree, p: torch.Tensor) -> VerifyPlan:
    """The multi-round plan for target distributions ``p [N, V]`` (row u: children of u); see the class docstring.

    Returns:
        ``accept_prob [N]``: ``p_u(x_k) / (1 - sum of p_u over the distinct earlier sibling tokens)``, 0 for a
        token an earlier sibling already carries (and 0 when nothing is left, 0/0 -> 0);
        residual rows (``residual_at``, built for the nodes asked for): ``p_u`` with every child token zeroed and
        renormalised (``p_u`` for leaves, and as a fallback when the children cover all of ``p_u``, a state
        reached with probability 0).

    Cost: two passes over ``[N, V]`` (a copy of ``p`` with the child tokens zeroed, and its row sums); the rest
    works on ``[N, N]`` gathers, and the walk builds the one residual row it samples from.

    Precision: as in the dense form, the mass left when ``x_k`` is tried is a sum of non-negative terms (the mass no
    child carries, plus the first occurrences of the sibling tokens from ``x_k`` on); a ``1 - tried`` shortcut
    would cancel when the earlier siblings hold nearly all of ``p_u`` (a test pins this).
    """
    n = p.shape[0]
    parent = parent_index(tree)
    idx = torch.arange(n, device=tree.device)
    earlier = earlier_siblings(tree)  # [N, N]
    # first[j]: no earlier sibling of j carries j's token (j is the first occurrence of its token among siblings)
    first = ~(earlier & (tree.tokens[:, None] == tree.tokens[None, :])).any(-1)  # [N]
    # rest[u]: p_u with every child token of u zeroed; rest_sum[u]: the mass no child of u carries
    rest = without_children(tree, p)  # [N, V], a copy
    rest_sum = rest.sum(-1)  # [N]
    p_sib = p[parent[:, None], tree.tokens[None, :]]  # [c, j] = p_{parent(c)}(x_j)
    # still in play when c is tried: the mass no child carries + first occurrences of sibling tokens at or after c
    untried = sibling_pairs(tree) & ~earlier & first[None, :]  # [c, j]: j is c or a later sibling
    left = rest_sum[parent] + torch.where(untried, p_sib, 0.0).sum(-1)  # [N]
    own = torch.where(first, p_sib.diagonal(), 0.0)  # p_u(x_c), 0 for a token an earlier sibling carries
    accept_prob = safe_div(own, left).clamp(max=1.0)
    accept_prob = torch.where(idx == 0, 1.0, accept_prob)

    def residual_at(nodes: torch.Tensor) -> torch.Tensor:
        """``nodes [...]`` -> ``[..., V]``: ``rest`` renormalised, or ``p`` where no mass is left."""
        r, s = rest[nodes], rest_sum[nodes][..., None]
        return torch.where(s > 0, safe_div(r, s), p[nodes])

    return VerifyPlan(accept_prob=accept_prob, residual_at=residual_at)


class MultiRoundVerifier(PlanVerifier):
    """Try the children of a node in index order; accept child ``x_k`` with probability ``p_k(x_k)``.

    ``p_0 = p_u`` (the target distribution at the parent ``u``) and ``p_k`` is ``p_u`` with the tokens of the
    earlier siblings ``x_1 .. x_{k-1}`` zeroed and renormalised. A token an earlier sibling already carries is
    zeroed, so a later duplicate gets probability 0. If every child is rejected the bonus is drawn from ``p_u``
    with all children's tokens zeroed and renormalised (a leaf's bonus is drawn from ``p_u``).

    Contract: the candidates are a deterministic function of the context (q one-hot, ``tree.q_dist is None``);
    in particular they do not depend on this verifier's coins.

    Why it is lossless: let ``S_k`` be the set of distinct tokens among ``x_1 .. x_{k-1}``. The walk reaches
    ``x_k`` with probability ``prod_{j<k} (1 - p_j(x_j))``, which telescopes to ``1 - p_u(S_k)``, and then accepts
    it with probability ``p_u(x_k) / (1 - p_u(S_k))``: ``P(first token = x_k) = p_u(x_k)``. A token ``y`` that is no
    candidate is emitted as the bonus with probability ``(1 - p_u(S)) * p_u(y) / (1 - p_u(S)) = p_u(y)``. Given the
    first token, the walk continues in that child's subtree with the child's own target distribution, so by
    induction over depth the whole emitted sequence follows the target process. The candidates must not depend on
    the coins; being a function of the context is the simplest way to guarantee that, and is what EAGLE-2/3/HASS
    top-k trees give.

    Raises ValueError on a stochastic tree (``q_dist`` set): sampled candidates carry a draft distribution q
    that :class:`~specdec.verify.stochastic.StochasticMultiRoundVerifier` uses to accept far more often. (For the
    record: because the argument above holds for *any* candidate list drawn independently of the coins, this rule
    would still be lossless on sampled candidates, only wasteful; we refuse to make misuse silent.)
    """

    def refuses(self, kind: TreeKind, sampling: SamplingParams) -> str | None:
        if kind.sampled:
            return f"MultiRoundVerifier is for deterministic candidates; the policy grows {kind.describe()}"
        return None

    def plan(self, tree: DraftTree, target_logits: torch.Tensor, sampling: SamplingParams) -> VerifyPlan:
        """``accept_prob [N]`` and the residual rows from p = ``warp(target_logits, sampling)``.

        Raises:
            ValueError: if ``tree.q_dist`` is set (stochastic candidates).
        """
        if tree.is_stochastic:
            raise ValueError(
                "MultiRoundVerifier is for deterministic candidates (q one-hot, tree.q_dist is None); this tree has "
                "sampled candidates: use StochasticMultiRoundVerifier"
            )
        return multiround_plan(tree, warp(target_logits, sampling, self.dtype))
