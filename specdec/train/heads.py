"""The head a run trains: a fresh one shaped after the target, or a trained one continued, with its draft vocabulary.

- :func:`build_head`: one decoder layer with the target's attention geometry (EAGLE-1/HASS or EAGLE-3);
- :func:`initial_head`: a trained head folder, checked against the run (kind, vocabulary, fused layers;
  :func:`check_init_head` before the run's features are extracted, :class:`InitHeadError` when it does not fit);
- :func:`with_draft_vocab`: an EAGLE-3 head moved onto another draft vocabulary, trained rows kept;
- :func:`make_head`: what a run starts from, from its :class:`~specdec.train.config.HeadConfig`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from specdec.eagle.config import EagleConfig
from specdec.eagle.heads import Eagle1Head, Eagle3Head
from specdec.errors import SpecdecError
from specdec.train.config import HeadConfig, InvalidOptionError
from specdec.train.draft_vocab import select_draft_vocab, token_frequencies
from specdec.train.head_init import init_from_target_layer

__all__ = ["InitHeadError", "build_head", "check_init_head", "initial_head", "make_head", "with_draft_vocab"]


class InitHeadError(SpecdecError, ValueError):
    """An ``init_head`` that does not fit the run: of another recipe's kind, or fusing other target layers."""


def build_head(
    recipe: str,
    target_config: Any,
    layers: Sequence[int] = (),
    draft_vocab_size: int | None = None,
    intermediate_size: int | None = None,
) -> Eagle1Head | Eagle3Head:
    """A fresh head shaped after the target's HF config (one decoder layer, the target's attention geometry)."""
    c = target_config
    heads = int(c.num_attention_heads)
    config = EagleConfig.model_validate(
        {
            "hidden_size": c.hidden_size,
            "intermediate_size": intermediate_size or c.intermediate_size,
            "num_attention_heads": heads,
            "num_key_value_heads": getattr(c, "num_key_value_heads", None) or heads,
            "head_dim": getattr(c, "head_dim", None) or c.hidden_size // heads,
            "vocab_size": c.vocab_size,
            "draft_vocab_size": draft_vocab_size if recipe == "eagle3" else c.vocab_size,
            "target_hidden_size": c.hidden_size,
            "rms_norm_eps": getattr(c, "rms_norm_eps", 1e-6),
            "rope_theta": _rope_theta(c),
            "max_position_embeddings": getattr(c, "max_position_embeddings", 2048),
            "hidden_act": getattr(c, "hidden_act", "silu"),
            "bias": True,
            "aux_layer_ids": tuple(layers) if recipe == "eagle3" else None,
        }
    )
    if recipe == "eagle3":
        return Eagle3Head(config, num_fused=len(layers))
    return Eagle1Head(config)


def _rope_theta(c: Any) -> float:
    theta = getattr(c, "rope_theta", None)
    params = getattr(c, "rope_parameters", None)
    if theta is None and isinstance(params, dict):
        theta = params.get("rope_theta")
    return float(theta or 10000.0)


def initial_head(path: str | Path, recipe: str, target: Any, layers: Sequence[int] = ()) -> Eagle1Head | Eagle3Head:
    """A trained head to continue training from (float32, in train mode), checked against the run.

    Continued training keeps what the head was built with: an EAGLE-3 head its draft vocabulary (``d2t``/``t2d``) and
    the target layers it fuses, which must be the run's feature ``layers``.

    Raises:
        CheckpointError: the folder holds no readable head.
        VocabMismatchError / InitHeadError: the head was made for another target (vocabulary or width), for another
            recipe (EAGLE-1/HASS heads and EAGLE-3 heads are not interchangeable), or fuses other layers.
    """
    from specdec.checkpoints import load_eagle_head

    head = load_eagle_head(path, target_model=target, dtype=torch.float32)
    want = Eagle3Head if recipe == "eagle3" else Eagle1Head
    if not isinstance(head, want):
        raise InitHeadError(f"init_head {path} is a {head.kind} head; the {recipe} recipe trains a {want.kind} head")
    if isinstance(head, Eagle3Head):
        aux = tuple(head.config.aux_layer_ids or ())
        if (aux and aux != tuple(layers)) or head.num_fused != len(layers):
            raise InitHeadError(
                f"init_head {path} fuses target layers {aux or head.num_fused} but the run extracts {tuple(layers)}; "
                "set eagle3_layers to the head's"
            )
    return head.train()


def check_init_head(options: HeadConfig, recipe: str, target: Any, layers: Sequence[int]) -> None:
    """Refuse an ``init_head`` that does not fit the run (as :func:`initial_head` does), and a ``draft_vocab_size``
    past the target's vocabulary, before features are extracted for them."""
    _check_draft_vocab(options, int(target.config.vocab_size))
    if options.init_head is not None:
        initial_head(options.init_head, recipe, target, layers)


def _check_draft_vocab(options: HeadConfig, vocab_size: int) -> None:
    """A ``draft_vocab_size`` given larger than the target's vocabulary was clamped silently (the config said 40, the
    head had 32): refused."""
    if options.draft_vocab_size is not None and options.draft_vocab_size > vocab_size:
        raise InvalidOptionError(
            f"draft_vocab_size {options.draft_vocab_size} exceeds the target's vocabulary of {vocab_size} tokens"
        )


def with_draft_vocab(head: Eagle3Head, draft_ids: torch.Tensor) -> Eagle3Head:
    """``head`` moved onto another draft vocabulary ``draft_ids`` ``[V_d']`` (increasing target ids).

    Every weight but the draft lm_head ``[V_d', H]`` is kept. A draft token the head already had keeps its trained
    lm_head row; a new one starts from the mean of the trained rows, so it starts at an average logit: neither
    winning the argmax nor ruled out. (The target's lm_head rows, a fresh head's init, do not fit the trained head's
    output space: on the SmolLM2 EAGLE-3 head they took held-out α₁ from 0.26 to 0.003.)
    """
    config = head.config.model_copy(update={"draft_vocab_size": int(draft_ids.numel())})
    new = Eagle3Head(config, with_embedding=head.embed_tokens is not None, num_fused=head.num_fused)
    new.set_vocab_map(draft_ids)
    state = {k: v for k, v in head.state_dict().items() if k not in ("lm_head.weight", "d2t", "t2d")}
    new.load_state_dict(state, strict=False)
    old_ids = head.to_target_ids(torch.arange(head.config.draft_vocab_size, device=head.d2t.device))
    old_row = torch.full((head.config.vocab_size,), -1, dtype=torch.long)
    old_row[old_ids.cpu()] = torch.arange(old_ids.numel())
    rows = old_row[draft_ids.cpu()]
    kept = rows >= 0
    trained = head.lm_head.weight.detach().cpu().to(new.lm_head.weight.dtype)
    with torch.no_grad():
        weight = trained.mean(0).expand(draft_ids.numel(), -1).clone()
        weight[kept] = trained[rows[kept]]
        new.lm_head.weight.copy_(weight)
    return new.train(head.training)


def make_head(
    options: HeadConfig,
    recipe: str,
    target: Any,
    layers: Sequence[int],
    train_rows: Sequence[dict[str, torch.Tensor]],
    lm_head_weight: torch.Tensor,
) -> Eagle1Head | Eagle3Head:
    """The head a run starts from, with the target's frozen embedding attached.

    Fresh (``options.init_head`` None): :func:`build_head`, optionally started from the target's last layer; an
    EAGLE-3 head gets the draft vocabulary of ``train_rows`` (the most frequent assistant tokens) and starts its
    lm_head from the target's rows ``lm_head_weight [V, H]`` of those tokens. Continued: :func:`initial_head`, moved
    onto a new vocabulary of ``train_rows`` only when ``options.draft_vocab_size`` is given.

    Args:
        train_rows: the training feature rows (``input_ids [T]``, ``loss_mask [T]``).
    """
    vocab_size = int(target.config.vocab_size)
    _check_draft_vocab(options, vocab_size)
    draft_vocab = min(vocab_size, options.draft_vocab_size or 32000)
    if options.init_head is not None:
        head = initial_head(options.init_head, recipe, target, layers)
    else:
        head = build_head(recipe, target.config, layers, draft_vocab, options.intermediate_size)
        if options.init_from_target:
            init_from_target_layer(head, target)
    if isinstance(head, Eagle3Head) and (options.init_head is None or options.draft_vocab_size is not None):
        rows = (train_rows[i] for i in range(len(train_rows)))
        counts = token_frequencies(((r["input_ids"], r["loss_mask"]) for r in rows), vocab_size)
        draft_ids = select_draft_vocab(counts, draft_vocab)
        if options.init_head is None:
            head.set_vocab_map(draft_ids)
            with torch.no_grad():  # start the draft lm_head from the target's rows of the draft tokens
                head.lm_head.weight.copy_(lm_head_weight[draft_ids.to(lm_head_weight.device)].cpu())
        else:
            head = with_draft_vocab(head, draft_ids)
    embed_weight = target.get_input_embeddings().weight.detach().to(lm_head_weight.device, torch.float32).clone()
    head.attach_target_embedding(embed_weight)
    return head
