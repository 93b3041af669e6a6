"""Several drafters behind one: a tree drafter (EAGLE, a small LM) and proposers of whole continuations (retrieval).

The decoding loop knows one drafter. :class:`CompositeDrafter` is that drafter: it hands every part the same
prompt and the same committed tokens (each keeps its own state), and answers the tree policy's ``expand`` calls
with its tree drafter. The proposers are read by :class:`~specdec.trees.composite.CompositeTreePolicy`, which
fills one tree with both kinds of candidates.

A proposer is a drafter with ``propose(root) -> list[Continuation]`` (:class:`~specdec.drafters.RetrievalDrafter`):
the continuations it would draft after the context ``history + [root]``, each a deterministic function of that
context (a point mass for the verifier).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specdec.interfaces import (
    Continuation,
    Drafter,
    HiddenRequest,
    Proposer,
    Target,
    TargetHidden,
    UnservableDrafterError,
    VocabMismatchError,
)
from specdec.tree import PartialTree

__all__ = ["CompositeDrafter", "UnservableDrafterError"]


class CompositeDrafter(Drafter):
    """One drafter made of a tree drafter and proposers.

    Args:
        tree_drafter: the drafter the tree policy drives through ``expand`` (EAGLE, small LM), or None for a tree of
            proposals only.
        proposers: drafters with ``propose`` (retrieval), read by the composite policy.

    Raises:
        UnservableDrafterError: no parts, a proposer without ``propose``.
        VocabMismatchError: the parts disagree on the vocabulary size (the message names the part).
    """

    def __init__(self, tree_drafter: Drafter | None, proposers: Sequence[Drafter]) -> None:
        self.tree_drafter = tree_drafter
        self.proposers = list(proposers)
        if tree_drafter is None and not self.proposers:
            raise UnservableDrafterError("a composite drafter needs a tree drafter or at least one proposer")
        for part in self.proposers:
            if not isinstance(part, Proposer):
                raise UnservableDrafterError(f"{_name(part)} proposes no continuations (it has no propose(root))")
        self.parts: list[Drafter] = ([tree_drafter] if tree_drafter is not None else []) + self.proposers
        self.vocab_size = self.parts[0].vocab_size
        for part in self.parts[1:]:
            if part.vocab_size != self.vocab_size:
                raise VocabMismatchError(
                    f"{_name(part)} has a vocabulary of {part.vocab_size}, {_name(self.parts[0])} of "
                    f"{self.vocab_size}: the drafters of one composite must share the target's tokenizer"
                )
        request = HiddenRequest()
        for part in self.parts:
            request = request | part.hidden_request
        self.hidden_request = request
        self.reset()

    @classmethod
    def for_target(cls, target: Target, tree_drafter: Drafter | None, proposers: Sequence[Drafter]) -> CompositeDrafter:
        """The composite for ``target``, every part checked against it when the composite is built.

        Raises:
            VocabMismatchError: a part's vocabulary is not the target's (named).
            UnservableDrafterError: a part asks for hidden states the target does not have (named).
        """
        for part in ([tree_drafter] if tree_drafter is not None else []) + list(proposers):
            if part.vocab_size != target.vocab_size:
                raise VocabMismatchError(
                    f"{_name(part)} has a vocabulary of {part.vocab_size}, the target {target.vocab_size}: it cannot "
                    "draft for this target"
                )
            layers = getattr(target, "num_layers", None)
            bad = [i for i in part.hidden_request.layers if layers is not None and not 0 <= i < layers]
            if bad:
                raise UnservableDrafterError(
                    f"{_name(part)} needs the hidden states of layers {bad}; the target has {layers} layers"
                )
        return cls(tree_drafter, proposers)

    def reset(self) -> None:
        super().reset()
        for part in getattr(self, "parts", []):
            part.reset()

    def fork(self) -> CompositeDrafter:
        """A composite of every part's fork (:meth:`Drafter.fork`)."""
        tree = None if self.tree_drafter is None else self.tree_drafter.fork()
        twin = type(self)(tree, [p.fork() for p in self.proposers])
        twin.generation = self.generation  # its policy, a copy of this one's, tells a new generation by the count
        return twin

    def proposals(self, root: int) -> list[Continuation]:
        """Every proposer's continuations after ``history + [root]``, in the proposers' order."""
        return [c for p in self.proposers for c in p.propose(root)]

    def prefill(self, input_ids: torch.Tensor, hidden: TargetHidden) -> None:
        super().prefill(input_ids, hidden)
        for part in self.parts:
            part.prefill(input_ids, hidden)

    def commit(self, tokens: torch.Tensor, hidden: TargetHidden) -> None:
        super().commit(tokens, hidden)
        for part in self.parts:
            part.commit(tokens, hidden)

    def expand(self, tree: PartialTree, frontier: torch.Tensor) -> torch.Tensor:
        return self._tree_part().expand(tree, frontier)

    def expand_topk(self, tree: PartialTree, frontier: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self._tree_part().expand_topk(tree, frontier, k)

    def expand_draft(self, tree: PartialTree, frontier: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        return self._tree_part().expand_draft(tree, frontier)

    def batch_part(self) -> Drafter:
        """The tree drafter's (its expansions are the composite's); itself without one."""
        return self if self.tree_drafter is None else self.tree_drafter.batch_part()

    def _tree_part(self) -> Drafter:
        if self.tree_drafter is None:
            raise UnservableDrafterError(
                "this composite has no tree drafter to expand a tree with: grow it with CompositeTreePolicy(None) "
                "(a tree of proposals only), or give the composite a tree drafter"
            )
        return self.tree_drafter

    def __repr__(self) -> str:
        return f"CompositeDrafter({', '.join(_name(p) for p in self.parts)})"


def _name(part: object) -> str:
    return type(part).__name__
