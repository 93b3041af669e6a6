"""EAGLE-3 drafter: fused target layer inputs through ``fc``, the head's own lm_head over a reduced draft vocabulary.

Same alignment, positions and cache layout as :mod:`specdec.drafters.eagle`. Differences:

* committed pairs feed ``fc(cat[h_low, h_mid, h_high])`` of the target layer inputs (default layers
  ``(2, L//2, L-3)``; HF ``hidden_states[i]`` is layer ``i``'s input);
* tree nodes feed their parent's **pre-norm** output (no ``fc``);
* logits are ``lm_head(norm(out))`` over the draft vocabulary, scattered to target ids ``i + d2t[i]`` with
  ``-inf`` for target tokens outside the draft vocabulary (they are never proposed).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from specdec.backends import StaticShapes
from specdec.drafters.eagle import EagleDrafterBase, _target_config
from specdec.drafters.eagle_steps import draft_backend, head_for
from specdec.eagle.config import default_aux_layers
from specdec.eagle.heads import Eagle3Head
from specdec.interfaces import HiddenRequest, TargetHidden

if TYPE_CHECKING:
    from specdec.target import HFTarget

__all__ = ["Eagle3Drafter"]


class Eagle3Drafter(EagleDrafterBase):
    """Drafter for EAGLE-3 heads (:class:`Eagle3Head`).

    Args:
        head: the draft head.
        target: the Hugging Face target model (embedding and ``config`` are read; its lm_head is not used).
        max_len: capacity in committed tokens.
        layers: target decoder layers whose inputs are fused, low -> high. Default: the head config's
            ``aux_layer_ids`` if set, else ``(2, L//2, L-3)`` with ``L`` the target's ``num_hidden_layers``.
        weights: ``"auto"`` (int8 draft weights on CPU), ``"int8"``, ``"packed"`` or ``"stock"`` for the head
            (:mod:`specdec.backends`).
        static_shapes: fixed-shape head steps compiled once per shape.
    """

    head: Eagle3Head

    def __init__(
        self,
        head: Eagle3Head,
        target: nn.Module,
        max_len: int,
        layers: Sequence[int] | None = None,
        weights: str = "auto",
        static_shapes: StaticShapes = False,
    ) -> None:
        if not isinstance(head, Eagle3Head):
            raise TypeError(f"Eagle3Drafter needs an Eagle3Head, got {type(head).__name__} (use EagleDrafter)")
        tcfg = _target_config(target)
        num_layers = tcfg.num_hidden_layers
        if layers is None:
            layers = head.config.aux_layer_ids or default_aux_layers(num_layers)
        layers = tuple(int(i) for i in layers)
        bad = [i for i in layers if not 0 <= i < num_layers]
        if bad:
            raise ValueError(f"fused layer ids {bad} outside the target's decoder layers [0, {num_layers})")
        if len(layers) != head.num_fused:
            raise ValueError(f"head fuses {head.num_fused} target states but {len(layers)} layers were given")
        self.layers = layers
        self.hidden_request = HiddenRequest(layers=layers)
        super().__init__(head, target, max_len, len(layers) * tcfg.hidden_size, weights, static_shapes)

    @classmethod
    def from_target(cls, target: HFTarget, head: str | Path | Eagle3Head, weights: str = "auto") -> Eagle3Drafter:
        """The drafter of an EAGLE-3 head for ``target``: device, dtype and cache size follow the target, static shapes
        too except on a CPU under ``weights="auto"`` (:func:`~specdec.drafters.eagle_steps.draft_backend`).

        Args:
            head: a head folder (or file) in any supported checkpoint format, or a loaded :class:`Eagle3Head`.
            weights: the head's weights (:mod:`specdec.backends`; ``"auto"``: int8 on a CPU).
        """
        loaded = head_for(target, head)
        return cls(loaded, target.model, target.max_len, None, *draft_backend(target, weights))

    def _features(self, hidden: TargetHidden) -> torch.Tensor:
        return hidden.fused(self.layers)

    def _input_hidden(self, features: torch.Tensor) -> torch.Tensor:
        return self.head.project(features)

    def _scorer(self) -> nn.Module:
        return self.head.scorer()  # [F, V_draft]: lm_head(norm(out))

    def _to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return self.head.to_target_ids(draft_ids)

    def _to_target_logits(self, draft_logits: torch.Tensor) -> torch.Tensor:
        return self.head.target_logits(draft_logits)
