"""Start a fresh head's decoder layer from the target's last decoder layer (a recipe switch, see ``TrainConfig``).

The EAGLE head's one layer predicts the target's next top-layer feature, which is close to what the target's own last
layer computes; copying that layer gives the head a starting point in the target's feature space instead of a random
one. What is copied:

- EAGLE-1 / HASS (``layers.0``, no input norm): ``q/k/v`` with the target's ``input_layernorm`` gain folded into
  their input columns (the head does not normalise its input), ``o_proj``, the MLP, ``post_attention_layernorm``.
- EAGLE-3 (``midlayer``, input ``cat[input_layernorm(emb), hidden_norm(h)]`` of width ``2H``): the target's ``q/k/v``
  into the **hidden half** (columns ``H:2H``; the embedding half keeps its random init), ``hidden_norm`` from the
  target's ``input_layernorm``, ``o_proj``, the MLP, ``post_attention_layernorm``, and the final ``norm`` from the
  target's final norm (the draft lm_head already starts from the target's rows).

Everything else (``fc``) keeps the fresh init; q/k/v biases the head has and the target lacks start at zero, and a
target with q/k/v biases needs a head built with them (refused otherwise).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from specdec.eagle.heads import Eagle1Head, Eagle3Head

__all__ = ["init_from_target_layer"]


def _copy(dst: torch.Tensor, src: torch.Tensor, name: str) -> None:
    if tuple(dst.shape) != tuple(src.shape):
        raise ValueError(f"cannot start the head's {name} {tuple(dst.shape)} from the target's {tuple(src.shape)}")
    dst.copy_(src.to(dst.dtype))


def _target_parts(target: Any) -> tuple[nn.Module, nn.Module]:
    """``(last decoder layer, final norm)`` of a Llama-style HF causal LM, or a ValueError naming what is missing."""
    decoder = target.get_decoder() if hasattr(target, "get_decoder") else getattr(target, "model", None)
    layers, norm = getattr(decoder, "layers", None), getattr(decoder, "norm", None)
    if not layers or norm is None:
        raise ValueError(f"{type(target).__name__} has no decoder .layers/.norm to start the head from")
    last = layers[-1]
    attn, mlp = getattr(last, "self_attn", None), getattr(last, "mlp", None)
    needed = [(attn, p) for p in ("q_proj", "k_proj", "v_proj", "o_proj")] + [
        (mlp, p) for p in ("gate_proj", "up_proj", "down_proj")
    ]
    # a linear the fast path packed (specdec.fastpath.PackedLinear) still gives its plain weight and bias
    missing = [
        p for module, p in needed if not isinstance(getattr(getattr(module, p, None), "weight", None), torch.Tensor)
    ]
    if missing or not hasattr(last, "input_layernorm") or not hasattr(last, "post_attention_layernorm"):
        raise ValueError(
            f"the target's last layer ({type(last).__name__}) is not Llama-shaped (missing {missing or 'norms'}); "
            "train from a random init"
        )
    return last, norm


@torch.no_grad()
def init_from_target_layer(head: Eagle1Head | Eagle3Head, target: Any) -> None:
    """Copy the target's last decoder layer into a fresh ``head`` in place (see the module docstring).

    Raises:
        ValueError: the target is not Llama-shaped, or a copied weight's shape differs from the head's (e.g. a head
            MLP width other than the target's).
    """
    last, final_norm = _target_parts(target)
    t_attn, t_mlp = last.self_attn, last.mlp
    gain = last.input_layernorm.weight.detach().float()  # [H]
    if isinstance(head, Eagle3Head):
        layer, h = head.midlayer, head.config.hidden_size
        for p in ("q_proj", "k_proj", "v_proj"):
            _copy(getattr(layer.self_attn, p).weight[:, h:], getattr(t_attn, p).weight, f"{p} hidden half")
        _copy(layer.hidden_norm.weight, last.input_layernorm.weight, "hidden_norm")
        _copy(head.norm.weight, final_norm.weight, "norm")
    else:
        layer = head.layers[0]
        for p in ("q_proj", "k_proj", "v_proj"):
            _copy(getattr(layer.self_attn, p).weight, getattr(t_attn, p).weight.float() * gain, p)
    for p in ("q_proj", "k_proj", "v_proj"):
        mine, theirs = getattr(layer.self_attn, p).bias, getattr(t_attn, p).bias
        if mine is None and theirs is not None:
            raise ValueError(f"the target's {p} has a bias but the head has none; build the head with qkv_bias=True")
        if mine is not None and theirs is None:
            mine.zero_()
        elif mine is not None:
            _copy(mine, theirs, f"{p} bias")
    _copy(layer.self_attn.o_proj.weight, t_attn.o_proj.weight, "o_proj")
    for p in ("gate_proj", "up_proj", "down_proj"):
        _copy(getattr(layer.mlp, p).weight, getattr(t_mlp, p).weight, p)
    _copy(layer.post_attention_layernorm.weight, last.post_attention_layernorm.weight, "post_attention_layernorm")
