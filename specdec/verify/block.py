"""Block verification of a chain (Sun et al., "Block Verification Accelerates Speculative Decoding", ICLR 2025)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from specdec.sampling import SamplingParams, warp
from specdec.tree import DraftTree
from specdec.verify.chain import ChainVerifier, chain_q
from specdec.verify.plan import VerifyPlan, safe_div

__all__ = ["BlockVerifier"]


class BlockVerifier(ChainVerifier):
    """Block verification: judge each prefix of the draft block as a whole, keep the longest prefix that passes.

    Token-level speculative sampling stops at the first rejected token. Block verification instead computes,
    for every prefix length ``i``, how far the target "owes" the draft along that prefix, and can accept a long
    prefix even after a position that token-level rules would reject. It never accepts fewer tokens in
    expectation than :class:`ChainVerifier` (the paper's Theorem 2) and emits exactly the target's distribution
    (Theorem 1).

    Notation (node ``i`` of the chain is at depth ``i``; node ``i >= 1`` carries draft token ``x_i``; ``γ`` is
    the last node):
    ``p_i = warp(target_logits)[i]`` is the target distribution of the token after node ``i``, and ``q_i`` is the
    draft distribution ``x_{i+1}`` was drawn from (one-hot for deterministic drafts).

    * ``P_0 = 1``, ``P_i = min(1, P_{i-1} p_{i-1}(x_i) / q_{i-1}(x_i))``: the prefix weight.
    * ``Z_{i+1} = sum_x max(0, P_i p_i(x) - q_i(x))`` for ``i < γ``: the mass the residual at ``i`` owes.
    * ``h_i = Z_{i+1} / (Z_{i+1} + 1 - P_i)`` for ``1 <= i < γ`` (1 where the denominator is 0), and ``h_γ = P_γ``.
    * With independent ``η_i ~ U(0, 1)``, ``τ = max{i >= 1 : η_i <= h_i}`` (0 if there is none). Accept
      ``x_1 .. x_τ``. The bonus is drawn from ``p_γ`` if ``τ = γ``, else from ``norm(max(0, P_τ p_τ - q_τ))``.

    Why it is lossless (Theorem 1 of the paper, sketched): by induction from the end of the block, the
    probability of emitting a given prefix and continuation through stop position ``τ = i`` telescopes. The
    weights ``P_i`` record how much of the target's mass for the prefix ``x_1..x_i`` the draft has supplied so
    far, and ``h_i`` is exactly the share of that mass not yet paid out at later positions. The residual
    ``max(0, P_i p_i - q_i)`` then pays out the rest, which makes the total equal ``p``. The exact suite checks
    the claim numerically (:mod:`specdec.testing.exact`, float64 enumeration).

    Contract (as :class:`ChainVerifier`): a chain, and each ``x_{i+1}`` was drawn from ``q_i`` independently of
    the coins. How it runs: the law of ``τ``, ``P(τ = i) = h_i prod_{j > i} (1 - h_j)`` (``h_0 = 1``), is turned
    into the walk's sequential accept probabilities by :meth:`VerifyPlan.from_stop_probs`. The end node then has
    the same distribution as under the paper's backward scan, so the emitted tokens do too. At temperature 0, p
    is one-hot and the rule reduces to greedy.
    """

    def plan(self, tree: DraftTree, target_logits: torch.Tensor, sampling: SamplingParams) -> VerifyPlan:
        """Stop law ``[N]`` of block verification and its bonus rows on demand (see the class docstring)."""
        self._check(tree)
        n = tree.num_nodes
        p = warp(target_logits, sampling, self.dtype)  # [N, V]: p_i
        q = chain_q(tree, p)  # [N, V]: q_i (last row unused)
        idx = torch.arange(1, n, device=tree.device)
        ratio = safe_div(p[idx - 1, tree.tokens[1:]], q[idx - 1, tree.tokens[1:]])  # [N - 1]: p/q at x_i
        weights = [torch.ones((), dtype=p.dtype, device=p.device)]  # P_0 .. P_γ
        for i in range(n - 1):  # γ is small (a chain's depth): a short loop of tensor ops, no sync
            weights.append(torch.clamp(weights[-1] * ratio[i], max=1.0))
        weight = torch.stack(weights)  # [N]
        # max(0, P_i p_i - q_i) for the nodes with a child (i < γ; the end of the chain owes nothing: h_γ = P_γ and
        # its bonus comes from p_γ), built in place: one new [N - 1, V] tensor
        owed = (p[:-1] * weight[:-1, None]).sub_(q[:-1]).clamp_(min=0.0)
        mass = owed.sum(-1)  # [N - 1]: Z_{i+1}
        denom = mass + (1.0 - weight[:-1])  # exactly mass when P_i = 1, so h_i = 1 exactly (greedy at T = 0)
        h = torch.where(denom > 0, safe_div(mass, denom), torch.ones_like(mass))
        h = torch.cat([torch.ones_like(weight[:1]), h[1:], weight[-1:]]) if n > 1 else torch.ones_like(weight)
        return VerifyPlan.from_stop_probs(tree, self._stop_law(h), residual_at=self._residual_at(owed, mass, p, q))

    def _stop_law(self, h: torch.Tensor) -> torch.Tensor:
        """``[N]``: ``P(τ = i) = h_i prod_{j > i} (1 - h_j)`` with ``h_0 = 1`` (the *last* position that passes)."""
        survive_after = torch.cat([torch.flip(torch.cumprod(torch.flip(1 - h[1:], [0]), 0), [0]), h.new_ones(1)])
        return h * survive_after

    def _residual_at(
        self, owed: torch.Tensor, mass: torch.Tensor, p: torch.Tensor, q: torch.Tensor
    ) -> Callable[[torch.Tensor], torch.Tensor]:
        """The bonus rows on demand (the walk reads one): ``norm(max(0, P_τ p_τ - q_τ))``, ``p_τ`` where nothing is
        owed (a state reached with probability 0) and ``p_γ`` at the end of the chain (``τ = γ``: all accepted).
        ``owed [N - 1, V]`` and ``mass [N - 1]`` are for the nodes with a child. Negative controls
        (:mod:`specdec.testing.broken`) override it."""
        last = p.shape[0] - 1

        def residual_at(nodes: torch.Tensor) -> torch.Tensor:
            if last == 0:  # the root alone: its bonus comes from p
                return p[nodes]
            row = nodes.clamp(max=last - 1)  # the end of the chain reads p
            total = mass[row][..., None]
            from_p = ~(total > 0) | (nodes == last)[..., None]
            return torch.where(from_p, p[nodes], owed[row].div_(torch.where(from_p, 1.0, total)))

        return residual_at
