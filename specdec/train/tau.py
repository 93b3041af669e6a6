"""Held-out τ with the real decoding loop: EAGLE-2 dynamic-tree greedy generation on held-out prompts.

The prompt of a held-out sequence is its tokens up to the first assistant (loss) token, so the head drafts
the assistant turn the way it will at inference.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from specdec.drafters import Eagle3Drafter, EagleDrafter
from specdec.eagle.heads import Eagle1Head, Eagle3Head
from specdec.generate import SpeculativeGenerator, StopCondition
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.trees import DynamicTreePolicy
from specdec.verify import GreedyVerifier

__all__ = ["dynamic_tree_tau", "heldout_prompts", "make_tau_fn", "tree_tau_counts"]


def dynamic_tree_tau(
    head: Eagle1Head | Eagle3Head,
    target_model: Any,
    prompts: list[torch.Tensor],
    max_new_tokens: int = 48,
    policy: DynamicTreePolicy | None = None,
) -> float:
    """Mean τ (tokens per target forward, bonus included) of greedy dynamic-tree decoding over ``prompts``.

    Args:
        head: a trained head (any device/dtype matching the target).
        target_model: the HF target the head drafts for.
        prompts: ``[L_i]`` long prompt token ids.
        policy: the tree (default: EAGLE-2's dynamic tree, top-k 8, depth 6, 32 nodes).
    """
    counts = tree_tau_counts(head, target_model, prompts, max_new_tokens, policy)
    return sum(t for t, _ in counts) / max(1, sum(f for _, f in counts))


def tree_tau_counts(
    head: Eagle1Head | Eagle3Head,
    target_model: Any,
    prompts: list[torch.Tensor],
    max_new_tokens: int = 48,
    policy: DynamicTreePolicy | None = None,
) -> list[tuple[int, int]]:
    """Per prompt, ``(tokens emitted, target forwards)`` of greedy dynamic-tree decoding (arguments as for
    :func:`dynamic_tree_tau`); the per-prompt pairs give paired comparisons of two heads on the same prompts."""
    policy = policy or DynamicTreePolicy(topk=8, depth=6, total_tokens=32)
    max_len = max(p.shape[0] for p in prompts) + max_new_tokens + policy.max_nodes + 8
    target = HFTarget(target_model, max_len=max_len)
    cls = Eagle3Drafter if isinstance(head, Eagle3Head) else EagleDrafter
    gen = SpeculativeGenerator(target, cls(head, target_model, max_len), policy, GreedyVerifier())
    counts = []
    for ids in prompts:
        stop = StopCondition(max_new_tokens=max_new_tokens)
        m = gen.generate(ids.to(target.device), SamplingParams(), stop, speculate="always").metrics  # the head's own τ
        counts.append((sum(a + 1 for a in m.accept_lengths), m.cycles))
    return counts


def heldout_prompts(store: Any, num_prompts: int) -> list[torch.Tensor]:
    """The prompts of the first ``num_prompts`` held-out rows: each row's tokens up to its first assistant token
    (``store``: rows with ``input_ids`` and ``loss_mask``, e.g. a feature store or a token dataset)."""
    prompts = []
    for i in range(min(num_prompts, len(store))):
        row = store[i]
        first = int(row["loss_mask"].long().argmax())
        if row["loss_mask"].any() and first > 0:
            prompts.append(row["input_ids"][:first])
    return prompts


def make_tau_fn(target_model: Any, num_prompts: int = 8, max_new_tokens: int = 48) -> Callable[[Any, Any], float]:
    """A ``tau_fn(head, heldout_store)`` hook for :func:`specdec.train.trainer.train`."""

    def tau_fn(head: Any, store: Any) -> float:
        prompts = heldout_prompts(store, num_prompts)
        return dynamic_tree_tau(head, target_model, prompts, max_new_tokens) if prompts else float("nan")

    return tau_fn
