"""How an EAGLE head runs: the compiled step (the head and its scorer as one graph) and the backend a head gets on a
target (:func:`draft_backend`); loading a head for a target (:func:`head_for`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from specdec.backends.compiled import freezes
from specdec.checkpoints import load_eagle_head
from specdec.eagle.layers import KVSlots

if TYPE_CHECKING:
    from specdec.target import HFTarget

__all__ = ["ScoredStep", "draft_backend", "head_for"]


class ScoredStep(nn.Module):
    """An EAGLE head's step and its scorer as one module, so the static path compiles them as one graph: no eager GEMM
    after each step (where graphs freeze, a CPU, the scorer's weights are packed with the head's; with CUDA graphs,
    one replay per step).

    Where graphs freeze, each graph holds its own packed copy of the scorer: for an EAGLE-1 head without a shortlist
    the scorer is the target's own lm_head (SmolLM2's is 113 MB in float32), copied into each root-step bucket's and
    node width's graph. Every static EAGLE drafter compiles this one ``forward``, so they share dynamo's recompile
    limit (:data:`specdec.backends.compiled.RECOMPILE_LIMIT` graphs per process).

    ``forward(input_embeds [1, T, H], hidden [1, T, H], position_ids [1, T], attn_bias, rows [R] | None, cache)``
    -> ``(out [R, H], logits [R, V_d] float32)``: the head's outputs at ``rows`` (None: all ``T``) and their logits.
    """

    def __init__(self, head: nn.Module, scorer: nn.Module) -> None:
        super().__init__()
        self.head, self.scorer = head, scorer

    def forward(
        self,
        input_embeds: torch.Tensor,
        hidden: torch.Tensor,
        position_ids: torch.Tensor,
        attn_bias: torch.Tensor,
        rows: torch.Tensor | None,
        cache: KVSlots,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        out, _ = self.head(input_embeds, hidden, position_ids, attn_bias, cache=cache)
        out = out[0] if rows is None else out[0].index_select(0, rows)
        return out, self.scorer(out).float()


def head_for(target: HFTarget, head: str | Path | nn.Module) -> nn.Module:
    """``head`` loaded (a path; checked against the target's model) and moved to the target's device and dtype."""
    if not isinstance(head, nn.Module):
        head = load_eagle_head(head, target_model=target.model)
    return head.to(device=target.device, dtype=target.dtype).eval()


def draft_backend(target: HFTarget, weights: str) -> tuple[str, bool]:
    """A head's ``(weights, static_shapes)`` on ``target``.

    An eager target: ``weights`` as given, eager steps. A static-shape target: compiled head steps on plain weights,
    except where compiled graphs freeze (a CPU, :func:`specdec.backends.compiled.freezes`) and ``weights`` is not
    ``"stock"``: there the head runs eagerly, on int8 weights under ``"auto"`` (or as asked: ``"int8"``, ``"packed"``).
    Drafting reads every weight once per level, so it is bound by memory there, and int8 reads a quarter of float32's
    bytes: EAGLE-3's five-level growth took 15-20 ms eager on int8 against 35 ms compiled (frozen float32, the lm_head
    inside the graph) on the Zen 3 (``docs/results/2026-11-28-draft-graphs-zen3``). ``weights="stock"`` keeps the
    compiled head on any device.
    """
    if not target.static:
        return weights, False
    if weights != "stock" and freezes(target.device):
        return weights, False
    return "stock", True
