"""The base class of every verifier here: a :class:`~specdec.verify.plan.VerifyPlan` followed by the shared walk.

Which trees and temperatures each verifier serves is stated by :meth:`PlanVerifier.refuses`, so a decoding loop can
refuse a pinned verifier before the first token (:class:`~specdec.interfaces.IncompatibleVerifierError`), and
:func:`~specdec.verify.verifier_for` can pick one per call.
"""

from __future__ import annotations

from abc import abstractmethod

import torch

from specdec.interfaces import Verdict, Verifier
from specdec.sampling import SamplingParams
from specdec.tree import DraftTree
from specdec.verify.plan import VerifyPlan
from specdec.verify.walk import walk

__all__ = ["PlanVerifier"]


class PlanVerifier(Verifier):
    """A verifier defined by its :class:`VerifyPlan`; :meth:`verify` is the shared :func:`walk`.

    Subclasses implement :meth:`plan` only. ``dtype`` is the dtype of the plan's probabilities: float32 in
    production, float64 in the exact tests.
    """

    def __init__(self, dtype: torch.dtype = torch.float32) -> None:
        self.dtype = dtype

    @abstractmethod
    def plan(self, tree: DraftTree, target_logits: torch.Tensor, sampling: SamplingParams) -> VerifyPlan:
        """Accept probabilities ``[N]`` and residual distributions ``[N, V]`` for ``tree``.

        Args:
            tree: the verified tree (``N`` nodes).
            target_logits: ``[N, V]``; row ``i`` is the target's logits for the children of node ``i``.
            sampling: settings; p = ``warp(target_logits, sampling, self.dtype)``.
        """

    def verify(
        self,
        tree: DraftTree,
        target_logits: torch.Tensor,
        sampling: SamplingParams,
        generator: torch.Generator | None,
    ) -> Verdict:
        """:meth:`plan`, then :func:`~specdec.verify.walk.walk` with ``generator`` (no host sync).

        Raises:
            ValueError: a mixed tree (``tree.point_mass`` set) for a verifier that does not read point masses.
        """
        if tree.is_mixed and not self.reads_point_masses:
            raise ValueError(
                f"{type(self).__name__} would take the point-mass children of this mixed tree for draws from q; "
                "verify it with MixedMultiRoundVerifier"
            )
        return walk(tree, self.plan(tree, target_logits, sampling), generator)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(dtype={self.dtype})"
