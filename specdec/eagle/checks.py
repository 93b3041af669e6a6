"""Checks an EAGLE drafter runs before drafting: does this head fit this target, is this draft vocabulary valid.

The drafters (:mod:`specdec.drafters.eagle`) call them when they are built, and
:func:`specdec.checkpoints.load_eagle_head` / :func:`specdec.checkpoints.load_draft_vocab` call them on what they
read, so a mismatch fails with one clear message before any forward runs.
"""

from __future__ import annotations

import torch
from torch import nn

from specdec.eagle.heads import Eagle1Head, Eagle3Head
from specdec.interfaces import VocabMismatchError

__all__ = ["check_draft_vocab", "check_head_device", "check_head_target"]


def check_draft_vocab(ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Validate a draft vocabulary ``[V_d]`` of target ids (strictly increasing, in ``[0, vocab_size)``); long copy."""
    ids = torch.as_tensor(ids).reshape(-1).to(torch.long)
    if ids.numel() == 0:
        raise ValueError("the draft vocabulary is empty")
    if int(ids.min()) < 0 or int(ids.max()) >= vocab_size:
        raise ValueError(f"draft vocabulary ids must lie in [0, {vocab_size}) (the target vocabulary)")
    if ids.numel() > 1 and not bool((ids[1:] > ids[:-1]).all()):
        raise ValueError("draft vocabulary ids must be strictly increasing (sorted, no duplicates)")
    return ids


def check_head_target(head: Eagle1Head | Eagle3Head, target: nn.Module) -> None:
    """Raise a clear error when ``head`` cannot run on the HF ``target``.

    Raises:
        VocabMismatchError: ``vocab_size`` differs.
        ValueError: the head's feature width (EAGLE-1 ``hidden_size``, EAGLE-3 ``target_hidden_size``) differs from
            the target's ``hidden_size``, or the head has no ``embed_tokens`` and the target's embedding width is not
            the head's ``hidden_size``.
    """
    tcfg = getattr(target.config, "text_config", None) or target.config
    if tcfg.vocab_size != head.config.vocab_size:
        raise VocabMismatchError(f"head vocab_size {head.config.vocab_size} != target vocab_size {tcfg.vocab_size}")
    eagle1 = isinstance(head, Eagle1Head)
    need = head.config.hidden_size if eagle1 else head.config.target_hidden_size
    if tcfg.hidden_size != need:
        what = "hidden_size" if eagle1 else "target_hidden_size"
        raise ValueError(f"head {what} {need} != target hidden_size {tcfg.hidden_size}")
    if head.embed_tokens is None:
        width = target.get_input_embeddings().weight.shape[-1]
        if width != head.config.hidden_size:
            raise ValueError(
                f"head hidden_size {head.config.hidden_size} != target embedding width {width} and the head has "
                "no embed_tokens of its own"
            )


def check_head_device(head: Eagle1Head | Eagle3Head, target: nn.Module) -> None:
    """Raise ``ValueError`` when ``head`` is on another device than ``target``: a drafter runs them together, and the
    first draft step would fail deep inside a tree policy (a GPU test's head sat on the CPU, 2026-11-30). Loading a
    head for a target (:func:`~specdec.checkpoints.load_eagle_head`) does not check this: the head is moved after."""
    head_device, target_device = head.fc.weight.device, target.get_input_embeddings().weight.device
    if head_device != target_device:
        raise ValueError(f"head on {head_device}, target on {target_device}: move the head first (head.to(device))")
