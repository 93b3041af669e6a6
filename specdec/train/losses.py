"""Loss terms of the EAGLE family (p = target distribution, q = draft distribution).

All functions take already *selected* rows: ``[N, ...]`` for the ``N`` trained positions of a batch (the caller
gathers the positions whose weight is non-zero, which also keeps ``[N, V]`` logits small). Each returns the mean
over rows (0 when ``N = 0``, still attached to the graph).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["feature_regression_loss", "soft_cross_entropy", "topk_distillation_loss", "top1_agreement"]


def _mean(per_row: torch.Tensor) -> torch.Tensor:
    return per_row.sum() / max(per_row.shape[0], 1)


def feature_regression_loss(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """EAGLE-1 feature loss: SmoothL1 (beta 1) averaged over the ``H`` dims, then over rows.

    Args:
        pred: ``[N, H]`` predicted features; target: ``[N, H]`` target features.
    """
    return _mean(F.smooth_l1_loss(pred, target, reduction="none").mean(-1))


def soft_cross_entropy(p_target: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """``−Σ_x p(x) log q(x)`` per row, averaged.

    Args:
        p_target: ``[N, V]`` target probabilities (no gradient expected).
        q_logits: ``[N, V]`` draft logits.
    """
    return _mean(-(p_target * F.log_softmax(q_logits.float(), dim=-1)).sum(-1))


def topk_distillation_loss(p_target: torch.Tensor, q_logits: torch.Tensor, k: int = 10) -> torch.Tensor:
    """HASS harmonized objective distillation: ``−Σ_{x ∈ top-k(p)} p(x) log q(x)`` (p not renormalised).

    Args:
        p_target: ``[N, V]`` target probabilities; q_logits: ``[N, V]`` draft logits; k: top-k of p.
    """
    k = min(k, p_target.shape[-1])
    p_top, idx = p_target.topk(k, dim=-1)
    log_q = F.log_softmax(q_logits.float(), dim=-1).gather(-1, idx)
    return _mean(-(p_top * log_q).sum(-1))


@torch.no_grad()
def top1_agreement(p_target: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """Fraction of rows where ``argmax q == argmax p`` (0-dim float; NaN-free: 0 when there are no rows)."""
    if p_target.shape[0] == 0:
        return p_target.new_zeros(())
    return (p_target.argmax(-1) == q_logits.argmax(-1)).float().mean()
