"""The speculators format (vllm-project/speculators): config translation and key maps, both directions.

A speculators checkpoint is a folder whose ``config.json`` names ``speculators_model_type`` (``"eagle"`` for
EAGLE-1/2/HASS, ``"eagle3"``), holds the draft layer's Llama config under ``transformer_layer_config`` and the
algorithm / verifier under ``speculators_config``. vLLM serves the ``eagle3`` kind directly (it flattens
``transformer_layer_config`` into the draft's HF config and reads the top-level EAGLE-3 fields).

Key maps (ours -> speculators):

* ``eagle``: ``fc.*`` -> ``fusion_fc.*``, ``layers.0.*`` -> ``transformer.*``; no embedding (taken from the verifier),
  no ``input_layernorm`` (an identity when ``layernorms`` is false, the only variant our heads represent).
* ``eagle3``: ``midlayer.*`` -> ``layers.0.*``; ``fc.weight``, ``norm.weight``, ``lm_head.weight``, ``d2t``, ``t2d``
  and an optional ``embed_tokens.weight`` keep their names.

Quirks: speculators serialises ``transformer_layer_config`` as a *diff* against ``LlamaConfig()``, so fields at
Llama's defaults may be absent (filled here with those defaults). ``norm_before_residual`` is false by default in
speculators but **true** by default in vLLM's speculators reader, so an export always writes it (false: our heads
keep the raw hidden state as the residual). Variants our heads do not represent (``norm_before_residual``,
``norm_before_fc``, EAGLE-1 ``layernorms``, non-Llama layers, MLP biases) are refused with a ``ValueError`` naming the
field; the loader turns it into a ``CheckpointError`` naming the file.

All functions here work on plain dicts and raise ``ValueError``; :mod:`specdec.checkpoints.load` and
:mod:`specdec.checkpoints.export` do the file I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from specdec.checkpoints.formats import export_rope_scaling
from specdec.eagle.config import EagleConfig

__all__ = [
    "is_speculators_config",
    "from_speculators_config",
    "from_speculators_keys",
    "to_speculators_config",
    "to_speculators_keys",
]

SPECULATORS_KINDS = {"eagle": "eagle1", "eagle3": "eagle3"}
# The fields of ``LlamaConfig()`` that speculators' diff serialisation may omit and that EagleConfig has no default
# for (the others, e.g. rope_theta, rms_norm_eps, num_key_value_heads, head_dim, default the same way there).
_LLAMA_DEFAULTS = {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32}
_EAGLE1_KEYS = (("fc.", "fusion_fc."), ("layers.0.", "transformer."))
_EAGLE3_KEYS = (("midlayer.", "layers.0."),)


def is_speculators_config(raw: Mapping[str, Any]) -> bool:
    """True for a speculators ``config.json`` (it names ``speculators_model_type``)."""
    return "speculators_model_type" in raw


def from_speculators_config(raw: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(kind, flat)``: the head kind (``"eagle1"`` / ``"eagle3"``) and a flat HF-style dict for
    :meth:`EagleConfig.from_hf <specdec.eagle.config.EagleConfig.from_hf>`.

    Raises:
        ValueError: an unknown kind, a missing or non-dict ``transformer_layer_config``, or a variant our heads do
            not represent (the message names the field).
    """
    model_type = raw.get("speculators_model_type")
    if model_type not in SPECULATORS_KINDS:
        raise ValueError(f"speculators_model_type {model_type!r} is not supported (one of {sorted(SPECULATORS_KINDS)})")
    kind = SPECULATORS_KINDS[model_type]
    layer = raw.get("transformer_layer_config")
    if not isinstance(layer, Mapping):
        raise ValueError("transformer_layer_config is missing or not an object")
    if layer.get("model_type", "llama") != "llama":
        raise ValueError(f"transformer_layer_config.model_type {layer['model_type']!r} is not supported (llama only)")
    if layer.get("mlp_bias"):
        raise ValueError("transformer_layer_config.mlp_bias is true; EAGLE heads have bias-free MLPs")
    flat: dict[str, Any] = {**_LLAMA_DEFAULTS, **layer}
    flat["qkv_bias"] = bool(layer.get("attention_bias", False))
    flat.pop("attention_bias", None)
    if kind == "eagle3":
        for field in ("norm_before_residual", "norm_before_fc"):
            if raw.get(field):
                raise ValueError(f"{field} is true; our EAGLE-3 head keeps the un-normalised hidden state")
        flat["draft_vocab_size"] = raw.get("draft_vocab_size")
        flat["target_hidden_size"] = raw.get("target_hidden_size")
        flat["eagle_aux_hidden_state_layer_ids"] = raw.get("eagle_aux_hidden_state_layer_ids")
    else:
        if raw.get("layernorms"):
            raise ValueError("layernorms is true (extra embedding / pre-lm-head norms); EAGLE-1 heads have none")
        architecture = raw.get("transformer_layer_architecture", "LlamaDecoderLayer")
        if architecture != "LlamaDecoderLayer":
            raise ValueError(f"transformer_layer_architecture {architecture!r} is not supported (LlamaDecoderLayer)")
        flat["bias"] = bool(raw.get("fusion_bias", False))
    return kind, flat


def _rename(state: Mapping[str, torch.Tensor], pairs: Sequence[tuple[str, str]]) -> dict[str, torch.Tensor]:
    out = {}
    for key, value in state.items():
        for old, new in pairs:
            if key.startswith(old):
                key = new + key[len(old) :]
                break
        out[key] = value
    return out


def from_speculators_keys(state: Mapping[str, torch.Tensor], kind: str) -> dict[str, torch.Tensor]:
    """Rename a speculators state dict to our keys (unknown keys are kept, so validation reports them)."""
    pairs = _EAGLE3_KEYS if kind == "eagle3" else _EAGLE1_KEYS
    return _rename(state, [(new, old) for old, new in pairs])


def to_speculators_keys(state: Mapping[str, torch.Tensor], kind: str) -> dict[str, torch.Tensor]:
    """Rename our state dict to speculators keys (``kind`` ``"eagle1"`` or ``"eagle3"``)."""
    return _rename(state, _EAGLE3_KEYS if kind == "eagle3" else _EAGLE1_KEYS)


def _layer_config(config: EagleConfig, dtype: str) -> dict[str, Any]:
    """A complete (not diff) Llama config for the draft layer: every field written, so no reader's default applies."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
        "num_hidden_layers": 1,
        "num_attention_heads": config.num_attention_heads,
        "num_key_value_heads": config.num_key_value_heads,
        "head_dim": config.head_dim,
        "hidden_act": config.hidden_act,
        "rms_norm_eps": config.rms_norm_eps,
        "rope_theta": config.rope_theta,
        "rope_scaling": export_rope_scaling(config.rope_scaling),
        "max_position_embeddings": config.max_position_embeddings,
        "attention_bias": config.qkv_bias,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "torch_dtype": dtype,
    }


def to_speculators_config(
    config: EagleConfig,
    kind: str,
    *,
    dtype: str,
    aux_layer_ids: Sequence[int] | None = None,
    verifier: str | None = None,
    speculative_tokens: int = 5,
) -> dict[str, Any]:
    """The speculators ``config.json`` for a head.

    Args:
        config: the head's config.
        kind: ``"eagle1"`` (EAGLE-1/2/HASS, speculators ``"eagle"``) or ``"eagle3"``.
        dtype: parameter dtype name (``"float32"``, ``"bfloat16"``, ...).
        aux_layer_ids: EAGLE-3 fused target layers in our (= vLLM's) convention; None: the readers' default
            ``(2, L//2, L-3)``.
        verifier: the target model's name or path (``speculators_config.verifier.name_or_path``), or None.
        speculative_tokens: draft length of the greedy proposal method (vLLM's default ``num_speculative_tokens``).
    """
    if kind not in ("eagle1", "eagle3"):
        raise ValueError(f"kind must be 'eagle1' or 'eagle3', got {kind!r}")
    if speculative_tokens < 1:
        raise ValueError(f"speculative_tokens must be >= 1, got {speculative_tokens}")
    algorithm = "eagle3" if kind == "eagle3" else "eagle"
    out: dict[str, Any] = {
        "speculators_model_type": algorithm,
        "transformer_layer_config": _layer_config(config, dtype),
        "speculators_config": {
            "algorithm": algorithm,
            "proposal_methods": [
                {
                    "proposal_type": "greedy",
                    "speculative_tokens": speculative_tokens,
                    "verifier_accept_k": 1,
                    "accept_tolerance": 0.0,
                }
            ],
            "default_proposal_method": "greedy",
            "verifier": {"name_or_path": verifier, "architectures": []},
        },
        "torch_dtype": dtype,
    }
    if kind == "eagle3":
        out["architectures"] = ["Eagle3Speculator"]
        out["draft_vocab_size"] = config.draft_vocab_size
        out["norm_before_residual"] = False  # vLLM's speculators reader defaults it to true
        out["target_hidden_size"] = (
            config.target_hidden_size if config.target_hidden_size != config.hidden_size else None
        )
        out["eagle_aux_hidden_state_layer_ids"] = [int(i) for i in aux_layer_ids] if aux_layer_ids else None
    else:
        out["architectures"] = ["EagleSpeculator", "LlamaDecoderLayer"]
        out["transformer_layer_architecture"] = "LlamaDecoderLayer"
        out["layernorms"] = False
        out["fusion_bias"] = config.bias
    return out
