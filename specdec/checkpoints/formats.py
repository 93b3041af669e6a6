"""The official EAGLE checkpoint formats: file names, key layouts and the quirks of released configs.

A checkpoint is a folder with ``config.json`` and ``model.safetensors`` or ``pytorch_model.bin``, or weights sharded
over several files listed by ``model.safetensors.index.json`` / ``pytorch_model.bin.index.json``. Key layouts
(EAGLE family reference, section 1):

* EAGLE-1 / EAGLE-2 / HASS: ``fc.*``, ``layers.0.{self_attn,mlp,post_attention_layernorm}.*``, optional
  ``embed_tokens.weight``; no ``input_layernorm``, no ``norm``, no ``lm_head``.
* EAGLE-3, SGLang / SpecForge layout (the official EAGLE code reads it too): ``fc.weight``, ``midlayer.*``,
  ``norm.weight``, ``lm_head.weight``, ``d2t``, ``t2d``.
* EAGLE-3, vLLM layout: ``layers.0.`` for ``midlayer.``, no ``t2d``. vLLM renames ``d2t`` to
  ``draft_id_to_target_id`` in memory only; it skips a *file* key of that name (drafting with the identity map), so
  the file key is always ``d2t`` and a file holding ``draft_id_to_target_id`` is refused on load.
* The speculators format: :mod:`specdec.checkpoints.speculators`.

Quirks of released checkpoints: ``d2t``/``t2d`` absent with ``draft_vocab_size == vocab_size`` mean the identity
mapping, and ``t2d`` alone absent is rebuilt from ``d2t`` (:func:`complete_vocab_map`); config quirks (``bias``
absent means True, ``rope_theta`` absent means 10000, EAGLE-3 configs claiming several layers) are read by
:meth:`EagleConfig.from_hf <specdec.eagle.config.EagleConfig.from_hf>` and the loader.

Aux layer ids (EAGLE-3 fused target layers) are written twice because servers disagree on the convention:
top-level ``eagle_aux_hidden_state_layer_ids`` (vLLM: id ``i`` = *input* of decoder layer ``i``, our convention)
and ``eagle_config.eagle_aux_hidden_state_layer_ids`` (SGLang/SpecForge: id ``i`` = *output* of layer ``i``, i.e.
ours minus one). When the head uses the default ``(2, L//2, L-3)`` nothing is written and every server uses that
same default (the official EAGLE code always uses it).

All functions here work on plain dicts and raise ``ValueError``; :mod:`specdec.checkpoints.load` and
:mod:`specdec.checkpoints.export` do the file I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from specdec.eagle.config import EagleConfig

__all__ = [
    "CONFIG_FILE",
    "DRAFT_VOCAB_FILE",
    "SAFETENSORS_FILE",
    "PICKLE_FILE",
    "SAFETENSORS_INDEX",
    "PICKLE_INDEX",
    "WEIGHT_FILES",
    "is_eagle3",
    "from_vllm_keys",
    "to_vllm_keys",
    "complete_vocab_map",
    "official_config",
    "export_rope_scaling",
]

CONFIG_FILE = "config.json"
DRAFT_VOCAB_FILE = "draft_vocab.safetensors"  # our side file: an EAGLE-1/HASS head's draft shortlist
SAFETENSORS_FILE = "model.safetensors"
PICKLE_FILE = "pytorch_model.bin"
SAFETENSORS_INDEX = "model.safetensors.index.json"
PICKLE_INDEX = "pytorch_model.bin.index.json"
# Looked for in this order (safetensors before pickles, as transformers does).
WEIGHT_FILES = (SAFETENSORS_FILE, SAFETENSORS_INDEX, PICKLE_FILE, PICKLE_INDEX)


def is_eagle3(state: Mapping[str, torch.Tensor], hidden_size: int) -> bool:
    """Whether a state dict in an official layout is an EAGLE-3 head: ``midlayer.*`` or ``hidden_norm`` keys, a
    vocabulary map, an ``lm_head`` or a final ``norm``, or an ``fc`` wider than an EAGLE-1 head's ``2H``."""
    keys = set(state)
    if keys & {"d2t", "t2d", "lm_head.weight", "norm.weight"}:
        return True
    if any(k.startswith("midlayer.") or k.endswith(".hidden_norm.weight") for k in keys):
        return True
    fc = state.get("fc.weight")
    return fc is not None and fc.ndim == 2 and fc.shape[1] != 2 * hidden_size


def from_vllm_keys(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """An EAGLE-3 state dict in the vLLM layout (``layers.0.*``) -> the SGLang layout (``midlayer.*``)."""
    return {("midlayer." + k[len("layers.0.") :] if k.startswith("layers.0.") else k): v for k, v in state.items()}


def to_vllm_keys(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """An EAGLE-3 state dict in the SGLang layout -> the vLLM layout (``layers.0.*``, no ``t2d``: vLLM skips it)."""
    return {
        ("layers.0." + k[len("midlayer.") :] if k.startswith("midlayer.") else k): v
        for k, v in state.items()
        if k != "t2d"
    }


def complete_vocab_map(
    state: Mapping[str, torch.Tensor], draft_vocab_size: int, vocab_size: int
) -> dict[str, torch.Tensor]:
    """An EAGLE-3 state dict with ``d2t`` and ``t2d`` filled in where the format lets them be absent.

    ``d2t`` absent with ``draft_vocab_size == vocab_size`` is the identity (zeros); ``t2d`` absent (the vLLM layout)
    is rebuilt from a ``d2t`` of the right shape ``[V_draft]``. Anything else is left for key validation to report.

    Raises:
        ValueError: ``d2t`` maps a draft id outside ``[0, vocab_size)``.
    """
    state = dict(state)
    if "d2t" not in state and draft_vocab_size == vocab_size:
        state["d2t"] = torch.zeros(draft_vocab_size, dtype=torch.long)
    d2t = state.get("d2t")
    if "t2d" not in state and d2t is not None and tuple(d2t.shape) == (draft_vocab_size,):
        ids = torch.arange(draft_vocab_size) + d2t.long()
        if ids.numel() and (ids.min() < 0 or ids.max() >= vocab_size):
            raise ValueError(f"d2t maps draft ids outside [0, {vocab_size})")
        t2d = torch.zeros(vocab_size, dtype=torch.bool)
        t2d[ids] = True
        state["t2d"] = t2d
    return state


def official_config(
    config: EagleConfig, kind: str, dtype: str, aux_layer_ids: Sequence[int] | None = None
) -> dict[str, Any]:
    """The ``config.json`` of the official layout for ``kind`` ``"eagle1"`` or ``"eagle3"``.

    Args:
        config: the head's config.
        kind: ``"eagle1"`` or ``"eagle3"``.
        dtype: parameter dtype name (``"float32"``, ``"bfloat16"``, ...).
        aux_layer_ids: EAGLE-3 fused target layers in our convention, written in both servers' conventions (see
            the module docstring); None writes none (every reader then uses ``(2, L//2, L-3)``).
    """
    out = config.to_hf(kind)
    out["torch_dtype"] = dtype
    out["rope_scaling"] = export_rope_scaling(out.get("rope_scaling"))
    if kind == "eagle3" and aux_layer_ids is not None:
        out["eagle_aux_hidden_state_layer_ids"] = [int(i) for i in aux_layer_ids]
        out["eagle_config"] = {
            "eagle_aux_hidden_state_layer_ids": [int(i) - 1 for i in aux_layer_ids],
            "use_aux_hidden_state": True,
        }
    return out


def export_rope_scaling(scaling: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``rope_scaling`` spelled for every reader: both ``type`` (the official EAGLE code indexes
    ``rope_scaling["type"]``) and ``rope_type`` (transformers, vLLM, SGLang)."""
    if not scaling:
        return None
    out = dict(scaling)
    name = out.get("rope_type", out.get("type"))
    if name is not None:
        out["rope_type"] = out["type"] = name
    return out
