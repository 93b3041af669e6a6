"""EAGLE-1 drafter (also EAGLE-2 / HASS heads): the head predicts the target's next feature and the target's lm_head
(or its rows for a shortlist) scores it. Alignment, positions, cache and steps: :mod:`specdec.drafters.eagle`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from specdec.backends import PackedLinear, StaticShapes, resolve
from specdec.backends.draft_int8 import draft_int8_linear
from specdec.checkpoints import load_draft_vocab
from specdec.drafters.eagle import EagleDrafterBase, _target_config
from specdec.drafters.eagle_steps import draft_backend, head_for
from specdec.eagle.checks import check_draft_vocab
from specdec.eagle.heads import Eagle1Head, scatter_vocab
from specdec.interfaces import HiddenRequest, TargetHidden

if TYPE_CHECKING:
    from specdec.target import HFTarget

__all__ = ["EagleDrafter"]


class EagleDrafter(EagleDrafterBase):
    """Drafter for EAGLE-1 / EAGLE-2 / HASS heads (:class:`Eagle1Head`).

    Consumes the target's post-norm last hidden state (``HiddenRequest(final=True)``); the head predicts the next
    feature and the **target's** lm_head turns it into logits.

    Args:
        head: the draft head (its ``embed_tokens`` is used if present, else the target's embedding is shared).
        target: the Hugging Face target model (``get_input_embeddings``, ``get_output_embeddings``, ``config``).
        max_len: capacity in committed tokens (the target's cache size).
        draft_vocab: ``[V_d]`` increasing target token ids the drafter may propose (a shortlist, e.g. the most frequent
            tokens of the training data), or None for the whole vocabulary. The head's features go through the
            target lm_head's rows for these ids only (``V_d / V`` of the full lm_head's cost); every other token
            gets draft probability 0.
        weights: how the head and the lm_head rows it scores run (:mod:`specdec.backends`): ``"auto"`` (int8 draft
            weights on CPU, :mod:`specdec.backends.draft_int8`, with an int8 copy of the lm_head rows), ``"int8"``,
            ``"packed"`` (fp32 oneDNN) or ``"stock"``.
        static_shapes: fixed-shape head steps compiled once per shape (the module docstring's "Static steps").

    Contract (losslessness is untouched): q is the softmax over the shortlist and exactly 0 elsewhere; the verifier
    scores the target's full vocabulary, so a token outside the shortlist is still emitted with its target
    probability (through the residual or the bonus), it is only never proposed.
    """

    hidden_request = HiddenRequest(final=True)

    def __init__(
        self,
        head: Eagle1Head,
        target: nn.Module,
        max_len: int,
        draft_vocab: torch.Tensor | None = None,
        weights: str = "auto",
        static_shapes: StaticShapes = False,
    ) -> None:
        if not isinstance(head, Eagle1Head):
            raise TypeError(f"EagleDrafter needs an Eagle1Head, got {type(head).__name__} (use Eagle3Drafter)")
        tcfg = _target_config(target)
        lm_head = target.get_output_embeddings()
        shape = getattr(lm_head, "out_features", None), getattr(lm_head, "in_features", None)
        if lm_head is None or shape != (tcfg.vocab_size, tcfg.hidden_size):
            raise ValueError("the target has no lm_head of shape [vocab_size, hidden_size]")
        self.lm_head, self.draft_vocab = lm_head, None
        kind = resolve(head, weights, static_shapes, draft=True)[0]
        if draft_vocab is not None or kind == "int8":  # the draft's own copy of the lm_head rows it scores
            ids = None if draft_vocab is None else check_draft_vocab(draft_vocab, tcfg.vocab_size)
            rows = nn.Linear(tcfg.hidden_size, tcfg.vocab_size if ids is None else ids.shape[0], bias=False).eval()
            if getattr(lm_head, "bias", None) is not None:
                raise ValueError("EagleDrafter: a target lm_head with a bias is not supported for draft copies")
            with torch.no_grad():
                w = lm_head.weight.detach()
                rows.weight.copy_(w if ids is None else w[ids.to(w.device)])
            rows = rows.to(device=lm_head.weight.device, dtype=lm_head.weight.dtype)
            if kind == "int8":
                self.lm_head = draft_int8_linear(rows, keep_weight=False)  # no float rows kept (not needed)
            elif kind == "stock":
                self.lm_head = rows
            else:
                self.lm_head = PackedLinear(rows)
            self.draft_vocab = None if ids is None else ids.to(lm_head.weight.device)
        super().__init__(head, target, max_len, head.config.hidden_size, weights, static_shapes)

    @classmethod
    def from_target(
        cls, target: HFTarget, head: str | Path | Eagle1Head, draft_shortlist: bool = True, weights: str = "auto"
    ) -> EagleDrafter:
        """The drafter of an EAGLE-1 / HASS head for ``target``: device, dtype and cache size follow the target, static
        shapes too except on a CPU under ``weights="auto"`` (:func:`~specdec.drafters.eagle_steps.draft_backend`).

        Args:
            head: a head folder (or file) in any supported checkpoint format, or a loaded :class:`Eagle1Head`.
            draft_shortlist: draft over the shortlist saved beside the head (``draft_vocab.safetensors``) when there
                is one, instead of the full vocabulary.
            weights: the head's weights (:mod:`specdec.backends`; ``"auto"``: int8 on a CPU).
        """
        vocab = None
        if not isinstance(head, nn.Module) and draft_shortlist:
            vocab = load_draft_vocab(head, target.vocab_size) if Path(head).is_dir() else None
        loaded = head_for(target, head)
        return cls(loaded, target.model, target.max_len, vocab, *draft_backend(target, weights))

    def _features(self, hidden: TargetHidden) -> torch.Tensor:
        if hidden.final is None:
            raise KeyError("EagleDrafter needs the target's final features (HiddenRequest(final=True))")
        return hidden.final

    def _scorer(self) -> nn.Module:
        return self.lm_head  # [F, V] or [F, V_d]

    def _to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids if self.draft_vocab is None else self.draft_vocab[draft_ids]

    def _to_target_logits(self, draft_logits: torch.Tensor) -> torch.Tensor:
        if self.draft_vocab is None:
            return draft_logits
        return scatter_vocab(draft_logits, self.draft_vocab, self.vocab_size)
