"""Additive attention biases (0 = visible, −inf = hidden) for multi-pass draft training.

Both builders return a ``[T, (n + 1) * T]`` float tensor for one pass/step ``n`` over a sequence of ``T`` draft
slots. The key axis is the concatenation of ``n + 1`` blocks of ``T`` keys: block 0 holds the keys computed from the
*target's* features (pass/step 0), block ``m`` the keys computed in pass/step ``m`` (the query block itself is the
last one, ``m = n``). The draft head is called with ``past_kv`` = blocks ``0 … n−1`` and produces block ``n``.
Every row keeps at least its own key visible, so no softmax row is empty. Right padding never leaks into valid
rows because a query never sees a key to its right.

Slot convention (EAGLE): slot ``t`` of the draft input holds ``(feature of token t, token t+1)``.

HASS harmonized context alignment, ``hass_attention_bias(T, j)`` (position convention, the HASS paper's):
    Pass ``j`` puts at position ``t`` the draft's own estimate of ``f_t`` made ``j`` draft steps after the target's
    last real feature, i.e. the input the draft sees when decoding has run ``j`` steps past committed position
    ``t − j``. Its context must then be: target keys at positions ``s ≤ t − j``, and the key that draft step ``m``
    wrote at position ``t − j + m`` for ``m = 1 … j`` (pass ``m``'s key there). Query ``(j, t)`` sees
    ``(0, s)`` iff ``s ≤ t − j`` and ``(m, s)`` for ``1 ≤ m ≤ j`` iff ``s = t − j + m``
    (positions ``< 0`` do not exist: near the start fewer keys are visible). ``j = 0`` is the causal mask.
    Positions (RoPE) stay ``t`` in every pass; pass ``j``'s targets are the same as pass 0's.

EAGLE-3 training-time test, ``ttt_attention_bias(T, k)`` (slot convention, targets shift):
    Step ``k`` at slot ``t`` is the ``k``-th draft step of a chain rooted at slot ``t``: input token ``x_{t+1+k}``,
    hidden = the draft's step ``k−1`` output at slot ``t``, RoPE position ``t + k``. It sees step-0 keys at slots
    ``s ≤ t`` (the real context) and, for each ``1 ≤ m ≤ k``, step ``m``'s key at the same slot ``t`` only (the
    earlier draft tokens of its own chain). This is the greedy chain's context, so the same bias drives the
    offline chain evaluation of any head.

HASS pass ``j`` at position ``t`` and TTT step ``j`` at slot ``t − j`` describe the same decoding state; the
two builders are kept separate because each training recipe indexes its targets its own way.
"""

from __future__ import annotations

import torch

__all__ = ["causal_attention_bias", "hass_attention_bias", "ttt_attention_bias", "as_batch_bias"]


def _to_bias(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    bias = torch.zeros(visible.shape, dtype=dtype, device=visible.device)
    return bias.masked_fill_(~visible, float("-inf"))


def causal_attention_bias(
    length: int, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
) -> torch.Tensor:
    """``[T, T]``: query ``t`` sees keys ``s ≤ t``."""
    idx = torch.arange(length, device=device)
    return _to_bias(idx[None, :] <= idx[:, None], dtype)


def hass_attention_bias(
    length: int, step: int, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
) -> torch.Tensor:
    """``[T, (j + 1) * T]`` bias of HASS pass ``j = step`` (see the module docstring).

    Key column ``m * T + s`` is position ``s`` of pass ``m``; query row ``t`` sees ``(0, s ≤ t − j)`` and
    ``(m, t − j + m)`` for ``m = 1 … j``.
    """
    if step < 0:
        raise ValueError("step must be >= 0")
    t = torch.arange(length, device=device)[:, None, None]  # query position
    m = torch.arange(step + 1, device=device)[None, :, None]  # key block (pass)
    s = torch.arange(length, device=device)[None, None, :]  # key position
    visible = torch.where(m == 0, s <= t - step, s == t - step + m)
    return _to_bias(visible.reshape(length, (step + 1) * length), dtype)


def ttt_attention_bias(
    length: int, step: int, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
) -> torch.Tensor:
    """``[T, (k + 1) * T]`` bias of training-time-test step ``k = step`` (see the module docstring).

    Key column ``m * T + s`` is slot ``s`` of step ``m``; query row ``t`` sees ``(0, s ≤ t)`` and ``(m, t)`` for
    ``m = 1 … k``.
    """
    if step < 0:
        raise ValueError("step must be >= 0")
    t = torch.arange(length, device=device)[:, None, None]
    m = torch.arange(step + 1, device=device)[None, :, None]
    s = torch.arange(length, device=device)[None, None, :]
    visible = torch.where(m == 0, s <= t, s == t)
    return _to_bias(visible.reshape(length, (step + 1) * length), dtype)


def as_batch_bias(bias: torch.Tensor, batch_size: int) -> torch.Tensor:
    """``[T, S]`` → ``[B, 1, T, S]`` (a broadcast view, no copy)."""
    return bias[None, None].expand(batch_size, 1, *bias.shape)
