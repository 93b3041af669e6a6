"""EAGLE-1 and EAGLE-3 draft heads as plain ``nn.Module`` s whose parameter names are the official checkpoint keys.

Shapes: ``B`` batch, ``T`` new positions, ``S`` attended positions (past + new), ``H`` head width,
``Hin`` attention input width (``H`` for EAGLE-1, ``2H`` for EAGLE-3), ``h_kv`` key/value heads, ``d`` head dim.

Both heads take their input embeddings from outside (``input_embeds``): normally the target's embedding, looked up
with :meth:`Eagle1Head.embed` / :meth:`Eagle3Head.embed`. Attention state is explicit: every forward takes the
keys/values of earlier positions (``past_kv``) and an additive bias over all attended positions (built with
:func:`specdec.attention.additive_mask`, as the target's masks are), and returns the new keys/values. Callers own
the cache (drafters keep preallocated buffers; training builds custom masks). Inference copies fuse projections
(:mod:`specdec.eagle.fusion`); checkpoints are read and written by :mod:`specdec.checkpoints`.

Positions: the pair (feature of token ``t``, token ``t+1``) sits at RoPE position ``t`` (the reference's
convention: pair index = position). A draft-tree node at depth ``k`` under a root pair at position ``r`` sits at
``r + k``. Training uses ``arange`` positions over pairs, so both agree; EAGLE-3 training-time-test step ``k``
uses ``t + k``.

The building blocks (attention, MLP, the two decoder layers, rotary embedding) are in :mod:`specdec.eagle.layers`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from specdec.eagle.config import EagleConfig
from specdec.eagle.layers import KV, Eagle1Layer, Eagle3Layer, KVSlots
from specdec.errors import SpecdecError

__all__ = ["MissingEmbeddingError", "Eagle1Head", "Eagle3Head", "scatter_vocab"]


class MissingEmbeddingError(SpecdecError, RuntimeError):
    """A head without its own ``embed_tokens`` was asked to embed tokens before a target embedding was attached."""


class _HeadBase(nn.Module):
    """Embedding plumbing shared by both heads: own ``embed_tokens`` or an attached (shared) target embedding."""

    embed_tokens: nn.Embedding | None

    def __init__(self, config: EagleConfig, with_embedding: bool) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size) if with_embedding else None
        # A plain tensor attribute (not a Parameter): shares the target's storage, never saved or cast with the head.
        self.target_embedding: torch.Tensor | None = None

    def attach_target_embedding(self, weight: torch.Tensor) -> None:
        """Use the target's embedding ``[V, H]`` (shared, not copied) when the head has no ``embed_tokens``."""
        if tuple(weight.shape) != (self.config.vocab_size, self.config.hidden_size):
            raise ValueError(
                f"target embedding {tuple(weight.shape)} does not fit the head "
                f"(vocab_size {self.config.vocab_size}, hidden_size {self.config.hidden_size})"
            )
        self.target_embedding = weight.detach()

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """``[...]`` long token ids -> ``[..., H]`` embeddings in the head's dtype."""
        dtype = self.fc.weight.dtype
        if self.embed_tokens is not None:
            return self.embed_tokens(input_ids).to(dtype)
        if self.target_embedding is None:
            raise MissingEmbeddingError(
                "this head has no embed_tokens (it uses the target's): load it with load_eagle_head(..., "
                "target_model=...) or call attach_target_embedding(target.get_input_embeddings().weight)"
            )
        w = self.target_embedding
        return F.embedding(input_ids.to(w.device), w).to(device=self.fc.weight.device, dtype=dtype)


class Eagle1Head(_HeadBase):
    """EAGLE-1 / EAGLE-2 / HASS head: ``fc(cat[emb, feature])`` then one decoder layer without input norm.

    State-dict keys: ``[embed_tokens.weight]``, ``fc.weight`` ``[H, 2H]``, ``[fc.bias]``,
    ``layers.0.self_attn.{q,k,v,o}_proj.weight`` (+ q/k/v biases with ``qkv_bias``),
    ``layers.0.mlp.{gate,up,down}_proj.weight``, ``layers.0.post_attention_layernorm.weight``.
    No final norm and no lm_head: logits are the *target's* lm_head applied to the output.
    """

    kind = "eagle1"

    def __init__(self, config: EagleConfig, with_embedding: bool = False) -> None:
        super().__init__(config, with_embedding)
        h = config.hidden_size
        self.fc = nn.Linear(2 * h, h, bias=config.bias)
        self.layers = nn.ModuleList([Eagle1Layer(config)])

    def forward(
        self,
        input_embeds: torch.Tensor,
        features: torch.Tensor,
        position_ids: torch.Tensor,
        attn_bias: torch.Tensor | Sequence[torch.Tensor],
        past_kv: KV | None = None,
        cache: KVSlots | Sequence[KVSlots] | None = None,
    ) -> tuple[torch.Tensor, KV]:
        """Predict the next feature for each (feature of token t, embedding of token t+1) pair.

        Args:
            input_embeds: ``[B, T, H]`` embeddings of tokens ``t+1``.
            features: ``[B, T, H]`` features of tokens ``t`` (target's post-norm last hidden state, or the head's
                own previous prediction).
            position_ids: ``[B, T]``; attn_bias: ``[B, 1, T, S]``; past_kv: ``(k, v)`` ``[B, h_kv, S-T, d]``;
            cache: or a preallocated cache (:class:`KVSlots`, see :meth:`EagleAttention.forward`).

        Returns:
            ``hidden [B, T, H]`` predicted features of tokens ``t+1`` and the new ``(k, v)`` ``[B, h_kv, T, d]``.
        """
        x = self.fc(torch.cat((input_embeds, features), dim=-1))
        return self.layers[0](x, position_ids, attn_bias, past_kv, cache)


class Eagle3Head(_HeadBase):
    """EAGLE-3 head: fused target states through ``fc``, one mid layer, own norm + lm_head over a draft vocab.

    State-dict keys: ``fc.weight`` ``[H, 3*H_t]``, ``midlayer.self_attn.{q,k,v}_proj.weight`` ``[*, 2H]``,
    ``midlayer.self_attn.o_proj.weight``, ``midlayer.mlp.{gate,up,down}_proj.weight``,
    ``midlayer.{hidden_norm,input_layernorm,post_attention_layernorm}.weight``, ``norm.weight``,
    ``lm_head.weight`` ``[V_draft, H]``, ``d2t`` int64 ``[V_draft]``, ``t2d`` bool ``[V]``, ``[embed_tokens.weight]``.
    """

    kind = "eagle3"
    d2t: torch.Tensor
    t2d: torch.Tensor

    def __init__(self, config: EagleConfig, with_embedding: bool = False, num_fused: int | None = None) -> None:
        super().__init__(config, with_embedding)
        h = config.hidden_size
        if num_fused is None:
            num_fused = len(config.aux_layer_ids) if config.aux_layer_ids else 3
        self.fc = nn.Linear(num_fused * config.target_hidden_size, h, bias=False)
        self.midlayer = Eagle3Layer(config)
        self.norm = LlamaRMSNorm(h, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(h, config.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(config.draft_vocab_size, dtype=torch.long))
        t2d = torch.zeros(config.vocab_size, dtype=torch.bool)
        t2d[: config.draft_vocab_size] = True
        self.register_buffer("t2d", t2d)

    @property
    def num_fused(self) -> int:
        """Number of fused target hidden states ``fc`` expects."""
        return self.fc.in_features // self.config.target_hidden_size

    def set_vocab_map(self, draft_to_target: torch.Tensor) -> None:
        """Set ``d2t``/``t2d`` from absolute target ids ``[V_draft]`` of the draft tokens (strictly increasing)."""
        ids = draft_to_target.to(device=self.d2t.device, dtype=torch.long)
        if ids.shape != self.d2t.shape:
            raise ValueError(f"draft_to_target {tuple(ids.shape)} must be [{self.d2t.shape[0]}]")
        if ids.numel() and (ids.min() < 0 or ids.max() >= self.config.vocab_size):
            raise ValueError(f"target ids must lie in [0, {self.config.vocab_size})")
        self.d2t.copy_(ids - torch.arange(ids.shape[0], device=ids.device))
        self.t2d.zero_()
        self.t2d[ids] = True

    def project(self, fused: torch.Tensor) -> torch.Tensor:
        """``[..., num_fused * H_t]`` concatenated target layer inputs (low -> high) -> ``[..., H]``."""
        return self.fc(fused.to(self.fc.weight.dtype))

    def forward(
        self,
        input_embeds: torch.Tensor,
        hidden: torch.Tensor,
        position_ids: torch.Tensor,
        attn_bias: torch.Tensor | Sequence[torch.Tensor],
        past_kv: KV | None = None,
        cache: KVSlots | Sequence[KVSlots] | None = None,
    ) -> tuple[torch.Tensor, KV]:
        """One mid-layer step.

        Args:
            input_embeds: ``[B, T, H]`` embeddings of tokens ``t+1``.
            hidden: ``[B, T, H]`` either :meth:`project` of the fused target states at ``t``, or the head's own
                previous pre-norm output.
            position_ids: ``[B, T]``; attn_bias: ``[B, 1, T, S]``; past_kv: ``(k, v)`` ``[B, h_kv, S-T, d]``;
            cache: or a preallocated cache (:class:`KVSlots`, see :meth:`EagleAttention.forward`).

        Returns:
            ``out_prenorm [B, T, H]`` (feed :meth:`logits`, or back in as ``hidden`` for the next draft step) and the
            new ``(k, v)`` ``[B, h_kv, T, d]``.
        """
        return self.midlayer(input_embeds, hidden, position_ids, attn_bias, past_kv, cache)

    def logits(self, out_prenorm: torch.Tensor) -> torch.Tensor:
        """``[..., H]`` -> ``[..., V_draft]`` draft-vocab logits ``lm_head(norm(out))``."""
        return self.lm_head(self.norm(out_prenorm))

    def scorer(self) -> nn.Module:
        """:meth:`logits` as a module (``norm`` then ``lm_head``, the head's own submodules, shared)."""
        return nn.Sequential(self.norm, self.lm_head)

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        """Draft ids (any shape, long) -> target ids ``draft_ids + d2t[draft_ids]``."""
        return draft_ids + self.d2t[draft_ids]

    def target_logits(self, draft_logits: torch.Tensor) -> torch.Tensor:
        """``[..., V_draft]`` -> ``[..., V]`` float32, draft logits at their target ids, ``-inf`` elsewhere."""
        ids = torch.arange(self.config.draft_vocab_size, device=self.d2t.device) + self.d2t
        return scatter_vocab(draft_logits, ids, self.config.vocab_size)


def scatter_vocab(draft_logits: torch.Tensor, ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Draft-vocabulary logits ``[..., V_d]`` -> ``[..., V]`` float32 at target ids ``ids [V_d]``, ``-inf`` elsewhere.

    Contract: softmax of the result is the draft distribution q over the target vocabulary, exactly 0 off ``ids``.
    """
    out = draft_logits.new_full((*draft_logits.shape[:-1], vocab_size), float("-inf"), dtype=torch.float32)
    out[..., ids] = draft_logits.float()
    return out
