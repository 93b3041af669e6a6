"""EAGLE-3 draft vocabulary: the most frequent target tokens at assistant positions of the training set.

Output format (the official checkpoint buffers):

- ``d2t`` int64 ``[V_d]``: draft id ``i`` ↔ target id ``i + d2t[i]``; draft ids are the chosen target ids sorted
  ascending, so ``d2t`` is non-decreasing and ``d2t[i] = target_id_i − i``;
- ``t2d`` bool ``[V]``: True for target ids in the draft vocab.

Ties in frequency are broken toward the smaller token id; tokens never seen fill the remaining slots in id order.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

__all__ = ["token_frequencies", "select_draft_vocab", "vocab_maps"]


def token_frequencies(sequences: Iterable[tuple[torch.Tensor, torch.Tensor]], vocab_size: int) -> torch.Tensor:
    """Count tokens at loss positions.

    Args:
        sequences: ``(input_ids [T], loss_mask [T])`` pairs.
        vocab_size: ``V``.

    Returns:
        ``[V]`` int64 counts.
    """
    counts = torch.zeros(vocab_size, dtype=torch.int64)
    for ids, mask in sequences:
        tokens = ids[mask.bool()]
        counts += torch.bincount(tokens.long(), minlength=vocab_size)[:vocab_size]
    return counts


def select_draft_vocab(counts: torch.Tensor, draft_vocab_size: int) -> torch.Tensor:
    """The ``draft_vocab_size`` most frequent token ids (ties → smaller id), sorted ascending: ``[V_d]`` int64."""
    vocab_size = counts.shape[0]
    if not 0 < draft_vocab_size <= vocab_size:
        raise ValueError(f"draft_vocab_size must be in [1, {vocab_size}], got {draft_vocab_size}")
    # stable sort by descending count keeps ascending ids within ties
    order = torch.sort(-counts.to(torch.int64), stable=True).indices
    return torch.sort(order[:draft_vocab_size]).values


def vocab_maps(draft_to_target: torch.Tensor, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sorted target ids ``[V_d]`` → ``(d2t [V_d] int64, t2d [V] bool)``."""
    ids = draft_to_target.to(torch.int64)
    if ids.numel() > 1 and not bool((ids[1:] > ids[:-1]).all()):
        raise ValueError("draft vocab target ids must be strictly increasing")
    d2t = ids - torch.arange(ids.numel(), dtype=torch.int64)
    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[ids] = True
    return d2t, t2d
