"""Greedy verification (temperature 0)."""

from __future__ import annotations

import torch

from specdec.interfaces import TreeKind
from specdec.sampling import SamplingParams, greedy_tokens
from specdec.tree import DraftTree
from specdec.verify.base import PlanVerifier
from specdec.verify.plan import VerifyPlan, parent_index

__all__ = ["GreedyVerifier"]


class GreedyVerifier(PlanVerifier):
    """Accept a child iff its token is the target argmax at its parent; the bonus is the argmax where the walk stops.

    Contract: ``sampling.temperature == 0``. Then the target process is deterministic (``warp`` returns the
    one-hot of ``argmax``, first index on ties), so the output is lossless iff every emitted token equals the
    argmax after its prefix. Accepted tokens equal the argmax by construction and the bonus is the argmax at the
    last accepted node, so the emitted sequence is exactly the greedy continuation, whatever the candidates
    (deterministic or sampled) were. ``accept_prob`` is 0/1, so no coin matters.

    With distinct sibling tokens at most one child of a node matches, so the walk follows the unique longest
    matching root path. With duplicate sibling tokens the walk takes the lowest-index match, which is still
    lossless but may be shorter than the longest matching path under a later duplicate.
    """

    #: Greedy acceptance reads no q at all: lossless for any candidates, point masses included.
    reads_point_masses = True

    def refuses(self, kind: TreeKind, sampling: SamplingParams) -> str | None:
        if not sampling.greedy:
            return f"GreedyVerifier serves temperature 0 only (this call asks for {sampling.temperature:g})"
        return None

    def plan(self, tree: DraftTree, target_logits: torch.Tensor, sampling: SamplingParams) -> VerifyPlan:
        """``accept_prob [N]`` = ``[token == argmax p_parent]``; the residual rows are the one-hots of ``bonus [N]``
        (the argmax at each node), named by ``bonus`` and never built as ``[N, V]``.

        Raises:
            ValueError: if ``sampling.temperature != 0``.
        """
        if not sampling.greedy:
            raise ValueError(
                f"GreedyVerifier needs temperature 0 (got {sampling.temperature}); use MultiRoundVerifier or "
                "StochasticMultiRoundVerifier (see specdec.verify.verifier_for)"
            )
        top = greedy_tokens(target_logits, self.dtype)  # [N]: p_u is the one-hot of top[u] (warp at T=0)
        accept_prob = (tree.tokens == top[parent_index(tree)]).to(self.dtype)
        accept_prob = torch.where(torch.arange(tree.num_nodes, device=tree.device) == 0, 1.0, accept_prob)
        return VerifyPlan(accept_prob=accept_prob, bonus=top, vocab_size=target_logits.shape[-1])
