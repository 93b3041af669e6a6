"""Prompt-lookup drafting: propose what followed the last time the context's ending appeared.

This is also the worked example of adding a drafter. A drafter is a :class:`~specdec.interfaces.Drafter` with
one method, ``expand``, and a ``vocab_size``; the engine drives it in this order::

    reset(); prefill(prompt, hidden)                  # once per generation (the base class keeps the history)
    repeat:
        expand(tree, [0]); expand(tree, frontier)...  # driven by the tree policy, one call per level
        commit([root, accepted...], hidden)           # what the target kept this cycle (appended to the history)

What ``expand`` must do here:

* return ``[F, V]`` logits, one row per frontier node. A node's context is the committed history followed by the
  tokens on the node's root path (:meth:`~specdec.interfaces.Drafter.contexts`). Nothing is kept between calls,
  so any frontier order works; ``hidden`` (target features) is never needed: this drafter is training-free and
  token-level, so its ``hidden_request`` stays empty.
* The logits must make ``softmax`` a proper distribution q whose top-k are the proposals, in rank order: the
  r-th candidate gets logit ``-r`` and every other token ``miss_logit`` (default ``-20``). With no match at
  all, every token gets ``miss_logit`` and q is uniform: the policy still builds a tree and the verifier simply
  rejects it, so a drafter never has to fail.

Lookup, for a context ``c`` of length ``L``: for ``n = max_ngram`` down to ``min_ngram``, take the suffix
``c[L-n:]``, compare it with every earlier window ``c[i:i+n]`` (``i + n < L``) in one ``unfold`` + ``==``, and
collect the tokens ``c[i+n]`` that followed the matches, most recent first. Longer matches rank before shorter
ones; duplicates keep their best rank; collection stops at ``num_candidates``. The cost is ``O(L * n)`` per
node and suffix length, fine for histories of a few thousand tokens.

The proposals are a deterministic function of the context, so a deterministic tree policy (static, dynamic)
plus a deterministic-candidate verifier is lossless at any temperature.
"""

from __future__ import annotations

import torch

from specdec.interfaces import Drafter, Target
from specdec.tree import PartialTree

__all__ = ["NGramDrafter"]


class NGramDrafter(Drafter):
    """Training-free drafter that copies continuations of repeated n-grams from the context.

    Args:
        vocab_size: the target's vocabulary size (rows of the returned logits).
        max_ngram: longest suffix tried first.
        min_ngram: shortest suffix tried last (at least 1).
        num_candidates: most proposals per node.
        miss_logit: logit of tokens that are not proposals; must be below ``-(num_candidates - 1)``.
    """

    def __init__(
        self,
        vocab_size: int,
        max_ngram: int = 3,
        min_ngram: int = 1,
        num_candidates: int = 10,
        miss_logit: float = -20.0,
    ) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got min_ngram={min_ngram}, max_ngram={max_ngram}")
        if num_candidates < 1:
            raise ValueError(f"num_candidates must be at least 1, got {num_candidates}")
        if not miss_logit < -(num_candidates - 1):
            last = -(num_candidates - 1)
            raise ValueError(f"miss_logit={miss_logit} must be below the last candidate's logit {last}")
        self.vocab_size = vocab_size
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.num_candidates = num_candidates
        self.miss_logit = miss_logit
        self.reset()

    @classmethod
    def from_target(cls, target: Target, **options: float) -> NGramDrafter:
        """A drafter over ``target``'s vocabulary (``options``: the constructor's keyword arguments)."""
        return cls(target.vocab_size, **options)

    def candidates(self, context: torch.Tensor) -> list[int]:
        """Proposed next tokens for ``context [L]`` (long, CPU), best first; empty if nothing matches."""
        found: list[int] = []
        length = context.shape[0]
        for n in range(min(self.max_ngram, length - 1), self.min_ngram - 1, -1):
            suffix = context[length - n :]
            windows = context[: length - 1].unfold(0, n, 1)  # [L - n, n]: window i is followed by context[i + n]
            starts = (windows == suffix).all(dim=-1).nonzero().flatten()
            for token in context[starts + n].flip(0).tolist():  # most recent match first
                if token not in found:
                    found.append(token)
                    if len(found) == self.num_candidates:
                        return found
        return found

    def expand(self, tree: PartialTree, frontier: torch.Tensor) -> torch.Tensor:
        """``[F, V]`` float32 logits: ``-rank`` for each node's candidates, ``miss_logit`` elsewhere."""
        logits = torch.full((frontier.shape[0], self.vocab_size), self.miss_logit, dtype=torch.float32)
        for row, context in enumerate(self.contexts(tree, frontier)):
            found = self.candidates(context)
            if found:
                logits[row, found] = -torch.arange(len(found), dtype=torch.float32)
        return logits.to(tree.device)
