"""Repetition loops in generated responses: where data generation cuts a response (:mod:`specdec.train.continuous`)."""

from __future__ import annotations

import torch

__all__ = ["ends_in_loop"]


def ends_in_loop(tokens: torch.Tensor, lengths: torch.Tensor, window: int) -> torch.Tensor:
    """Per row, whether the response ``tokens[r, :lengths[r]]`` ends in a repetition loop.

    A loop: the last ``W = window`` tokens equal the ``W`` tokens ``d`` positions earlier for some period
    ``1 <= d <= W // 2``, all of them response tokens (so a loop shows once ``W + d`` of its tokens exist).

    Args:
        tokens: ``[B, L]`` long, each row's response so far (left-aligned; entries past its length are ignored).
        lengths: ``[B]`` long.
        window: ``W >= 2``.

    Returns:
        ``[B]`` bool.
    """
    b = tokens.shape[0]
    looped = torch.zeros(b, dtype=torch.bool)
    tail_idx = lengths[:, None] - window + torch.arange(window)[None]  # [B, W]
    if tokens.shape[1] == 0:
        return looped
    tail = tokens.gather(1, tail_idx.clamp(min=0))
    for d in range(1, window // 2 + 1):
        room = lengths - window - d >= 0  # [B]: W + d response tokens exist
        if not room.any():
            break
        earlier = tokens.gather(1, (tail_idx - d).clamp(min=0))
        looped |= room & (tail == earlier).all(dim=1)
    return looped
