"""Inference copies of the EAGLE heads: fused projections and norms, the same values in fewer ops.

The drafters run a private copy of the head (``specdec.backends.packed_copy(head, transform=fuse_for_inference)``,
which then packs or int8-quantises the copy's linears). :func:`fuse_for_inference` stacks ``q/k/v`` into one
``qkv_proj`` and ``gate/up`` into one ``gate_up_proj`` (one GEMM instead of three or two: each output row is still
computed from the same weight row) and swaps the ``LlamaRMSNorm`` s for :class:`~specdec.backends.norms.FusedRMSNorm`
(one op instead of six in float32, the same values). The state-dict keys change, so a fused copy is never saved;
the caller's head keeps the official layout.
"""

from __future__ import annotations

from torch import nn

from specdec.backends.norms import FusedRMSNorm, fuse_norms
from specdec.backends.stacking import stacked_linear
from specdec.eagle.layers import EagleAttention, EagleMLP

__all__ = ["FusedRMSNorm", "fuse_for_inference"]


def fuse_for_inference(module: nn.Module) -> nn.Module:
    """Fuse ``q/k/v`` and ``gate/up`` of every EAGLE attention and MLP under ``module`` in place; returns it.

    Also swaps the RMS norms for :class:`~specdec.backends.norms.FusedRMSNorm` s. The outputs are the same values;
    the state-dict keys change, so this is for inference copies
    (``specdec.backends.packed_copy(..., transform=fuse_for_inference)``).
    """
    for sub in list(module.modules()):
        if isinstance(sub, EagleAttention):
            _fuse_attention(sub)
        elif isinstance(sub, EagleMLP):
            _fuse_mlp(sub)
    fuse_norms(module)
    return module


def _fuse_attention(attn: EagleAttention) -> None:
    """Replace ``q/k/v_proj`` by one ``qkv_proj`` over their stacked rows (the forward splits its output)."""
    if attn.qkv_proj is not None:
        return
    attn.qkv_proj = stacked_linear((attn.q_proj, attn.k_proj, attn.v_proj))
    del attn.q_proj, attn.k_proj, attn.v_proj


def _fuse_mlp(mlp: EagleMLP) -> None:
    """Replace ``gate/up_proj`` by one ``gate_up_proj`` over their stacked rows (the forward chunks its output)."""
    if mlp.gate_up_proj is not None:
        return
    mlp.gate_up_proj = stacked_linear((mlp.gate_proj, mlp.up_proj))
    del mlp.gate_proj, mlp.up_proj
