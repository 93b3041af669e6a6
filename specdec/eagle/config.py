"""The configuration of an EAGLE-1 or EAGLE-3 head, read from and written to a Llama-style ``config.json``.

:class:`EagleConfig` is what the head modules (:mod:`specdec.eagle.heads`) are built from. Its
:meth:`~EagleConfig.from_hf` applies the quirks of the official configs (EAGLE family reference, section 1) and
:meth:`~EagleConfig.to_hf` writes the official layout; the checkpoint files themselves are read and written by
:mod:`specdec.checkpoints`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from transformers.activations import ACT2FN

__all__ = ["EagleConfig", "default_aux_layers"]


def default_aux_layers(num_target_layers: int) -> tuple[int, int, int]:
    """EAGLE-3's fused target layers ``(2, L//2, L-3)``, clamped to ``[0, L)``: decoder layers whose *inputs* are fused.

    Layer ``i``'s input is HF ``hidden_states[i]`` (``0`` = the embeddings).
    """
    n = num_target_layers
    if n < 1:
        raise ValueError(f"a target needs at least one decoder layer, got {n}")
    low, mid, high = (min(max(i, 0), n - 1) for i in (2, n // 2, n - 3))  # tiny targets (n < 3): clamped into range
    return (low, mid, high)


class EagleConfig(BaseModel):
    """Configuration of an EAGLE-1 or EAGLE-3 head, parsed from a Llama-style ``config.json``.

    Build it with :meth:`from_hf`, which applies the official quirks (EAGLE family reference, section 1):
    ``bias`` absent means True (EAGLE-1 ``fc`` bias), ``rope_theta`` absent means 10000, ``qkv_bias`` may be spelled
    ``attention_bias``, ``draft_vocab_size`` absent means ``vocab_size``.

    Attributes:
        aux_layer_ids: EAGLE-3 fused target layers in *our* convention (index of the decoder layer whose input is
            fused = HF ``hidden_states`` index), or None for the default ``(2, L//2, L-3)``.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    hidden_size: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_key_value_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    draft_vocab_size: int = Field(gt=0)
    target_hidden_size: int = Field(gt=0)
    rms_norm_eps: float = Field(default=1e-6, gt=0)
    rope_theta: float = Field(default=10000.0, gt=0)
    rope_scaling: dict[str, Any] | None = None
    max_position_embeddings: int = 2048
    bias: bool = True
    qkv_bias: bool = False
    hidden_act: str = "silu"
    num_hidden_layers: int = 1
    aux_layer_ids: tuple[int, ...] | None = None

    @model_validator(mode="before")
    @classmethod
    def _fill_defaults(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        d = dict(data)
        if d.get("num_key_value_heads") is None:
            d["num_key_value_heads"] = d.get("num_attention_heads")
        if d.get("head_dim") is None and d.get("hidden_size") and d.get("num_attention_heads"):
            d["head_dim"] = d["hidden_size"] // d["num_attention_heads"]
        if d.get("draft_vocab_size") is None:
            d["draft_vocab_size"] = d.get("vocab_size")
        if d.get("target_hidden_size") is None:
            d["target_hidden_size"] = d.get("hidden_size")
        if d.get("rope_theta") is None:
            d["rope_theta"] = 10000.0
        if d.get("bias") is None:
            d["bias"] = True
        return d

    @model_validator(mode="after")
    def _check(self) -> EagleConfig:
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads {self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads {self.num_key_value_heads}"
            )
        if self.head_dim % 2:
            raise ValueError(f"head_dim {self.head_dim} must be even for RoPE")
        if self.draft_vocab_size > self.vocab_size:
            raise ValueError(f"draft_vocab_size {self.draft_vocab_size} exceeds vocab_size {self.vocab_size}")
        if self.hidden_act not in ACT2FN:
            raise ValueError(f"unknown hidden_act {self.hidden_act!r}")
        rope_type = self.rope_type
        if rope_type not in ("default", "linear", "dynamic", "llama3"):
            raise ValueError(f"rope_scaling type {rope_type!r} is not supported (default, linear, dynamic, llama3)")
        return self

    @property
    def rope_type(self) -> str:
        if not self.rope_scaling:
            return "default"
        return str(self.rope_scaling.get("rope_type", self.rope_scaling.get("type", "default")))

    @classmethod
    def from_hf(cls, raw: Mapping[str, Any]) -> EagleConfig:
        """Parse a ``config.json`` dict (official EAGLE-1/3, SpecForge/SGLang, vLLM, or our exports of them).

        Aux layer ids: a top-level ``eagle_aux_hidden_state_layer_ids`` (vLLM / speculators) already uses our
        convention (input of layer ``i``); ``eagle_config.eagle_aux_hidden_state_layer_ids`` alone is read with the
        SGLang/SpecForge convention (output of layer ``i`` = input of layer ``i + 1``) and shifted by one.
        """
        d = dict(raw)
        rope_params = d.get("rope_parameters")
        if isinstance(rope_params, Mapping):  # transformers >= 5 spelling
            d.setdefault("rope_theta", rope_params.get("rope_theta"))
            if rope_params.get("rope_type", "default") != "default" and not d.get("rope_scaling"):
                d["rope_scaling"] = {k: v for k, v in rope_params.items() if k != "rope_theta"}
        if d.get("qkv_bias") is None:
            d["qkv_bias"] = bool(d.get("attention_bias", False))
        aux = d.get("eagle_aux_hidden_state_layer_ids")
        if aux is None:
            eagle_config = d.get("eagle_config")
            if isinstance(eagle_config, Mapping) and eagle_config.get("eagle_aux_hidden_state_layer_ids") is not None:
                aux = [int(i) + 1 for i in eagle_config["eagle_aux_hidden_state_layer_ids"]]
        if aux is None:
            aux = d.get("aux_layer_ids")  # the field's own name (our convention), e.g. a config built in code
        d["aux_layer_ids"] = tuple(int(i) for i in aux) if aux is not None else None
        return cls.model_validate(d)

    def to_hf(self, kind: str) -> dict[str, Any]:
        """A ``config.json`` dict in the official layout for ``kind`` ``"eagle1"`` or ``"eagle3"``."""
        out: dict[str, Any] = {
            "architectures": ["LlamaForCausalLMEagle3" if kind == "eagle3" else "LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "num_hidden_layers": 1,
            "hidden_act": self.hidden_act,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_scaling": self.rope_scaling,
            "max_position_embeddings": self.max_position_embeddings,
            "vocab_size": self.vocab_size,
            "tie_word_embeddings": False,
        }
        if kind == "eagle3":
            out["draft_vocab_size"] = self.draft_vocab_size
            # The official EAGLE code reads the presence of this field as "the head carries its own embedding" and
            # otherwise copies the target's: write it only when the widths differ (then the export must carry one).
            if self.target_hidden_size != self.hidden_size:
                out["target_hidden_size"] = self.target_hidden_size
            out["attention_bias"] = self.qkv_bias
        else:
            out["bias"] = self.bias
            out["qkv_bias"] = self.qkv_bias
        return out
