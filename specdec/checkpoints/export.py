"""Write EAGLE-1 / EAGLE-3 heads as checkpoint folders: our own round trip, and exports a server reads.

:func:`save_eagle_head` writes any head :func:`~specdec.checkpoints.load.load_eagle_head` reads back, in the official
layout (EAGLE-3: the SGLang/SpecForge one). :func:`export_eagle3` and :func:`export_speculators` hand a head to a
server (SGLang/SpecForge, the official EAGLE code, vLLM) and refuse heads a server would misread
(``tests/test_checkpoint_consumers.py`` applies each server's loading rules to the exported folder): q/k/v biases
(the official EAGLE-3 code and SGLang build bias-free projections and drop them; vLLM then also expects an
``o_proj`` bias our heads do not have) and a fused-state count other than three. Layouts and config conventions:
:mod:`specdec.checkpoints.formats`, :mod:`specdec.checkpoints.speculators`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import nn

from specdec.checkpoints.formats import (
    CONFIG_FILE,
    DRAFT_VOCAB_FILE,
    SAFETENSORS_FILE,
    official_config,
    to_vllm_keys,
)
from specdec.checkpoints.speculators import to_speculators_config, to_speculators_keys
from specdec.eagle.checks import check_draft_vocab
from specdec.eagle.heads import Eagle1Head, Eagle3Head

__all__ = ["EXPORT_LAYOUTS", "save_eagle_head", "export_eagle3", "export_speculators", "save_draft_vocab"]

EXPORT_LAYOUTS = ("sglang", "vllm", "speculators")


def save_eagle_head(head: Eagle1Head | Eagle3Head, directory: str | Path) -> Path:
    """Write ``config.json`` + ``model.safetensors`` in the official layout (EAGLE-3: the SGLang/SpecForge one).

    Writes any head :func:`load_eagle_head` reads back (q/k/v biases, any number of fused states); to hand a head to
    a server use :func:`export_eagle3` / :func:`export_speculators`, which refuse what the server would misread.
    Tensors: the head's state dict (see :class:`~specdec.eagle.heads.Eagle1Head` and
    :class:`~specdec.eagle.heads.Eagle3Head`; e.g. EAGLE-3 ``fc.weight`` ``[H, 3*H_t]``,
    ``lm_head.weight`` ``[V_draft, H]``, ``d2t`` ``[V_draft]``).

    Returns the folder.
    """
    if isinstance(head, Eagle3Head):
        return _write_eagle3(head, directory, "sglang", _aux_ids(head, None))
    if not isinstance(head, Eagle1Head):
        raise TypeError(f"not an EAGLE head: {type(head).__name__}")
    return _write(directory, official_config(head.config, "eagle1", _dtype_name(head)), head.state_dict())


def export_eagle3(
    head: Eagle3Head,
    directory: str | Path,
    layout: str = "sglang",
    aux_layer_ids: Sequence[int] | None = None,
    *,
    verifier: str | None = None,
    speculative_tokens: int = 5,
) -> Path:
    """Export an EAGLE-3 head for a server: SGLang/SpecForge, the official EAGLE code and vLLM (``layout="sglang"``),
    vLLM (``layout="vllm"``) or the speculators format (``layout="speculators"``, served by vLLM).

    Args:
        head: the head.
        directory: output folder (created).
        layout: ``"sglang"``: ``midlayer.*``, ``d2t`` ``[V_draft]`` int64, ``t2d`` ``[V]`` bool (read by all three
            servers); ``"vllm"``: ``layers.0.*``, ``d2t``, no ``t2d`` (vLLM skips it); ``"speculators"``: see
            :func:`export_speculators`.
        aux_layer_ids: fused target layers in our convention (input of layer ``i``); default the head config's,
            and if that is None too, none is written (servers then use ``(2, L//2, L-3)``, as we do).
        verifier: speculators layout only: the target's name or path, recorded in the config.
        speculative_tokens: speculators layout only: the draft length recorded in the config.

    Returns the folder.

    Raises:
        ValueError: an unknown layout; aux ids that do not match the fused-state count; a head a server would misread
            (q/k/v biases, not three fused states); widths that differ without an attached target embedding.
    """
    if not isinstance(head, Eagle3Head):
        raise TypeError(f"export_eagle3 needs an Eagle3Head, got {type(head).__name__}")
    if layout not in EXPORT_LAYOUTS:
        raise ValueError(f"layout must be one of {EXPORT_LAYOUTS}, got {layout!r}")
    if layout == "speculators":
        return export_speculators(
            head, directory, aux_layer_ids=aux_layer_ids, verifier=verifier, speculative_tokens=speculative_tokens
        )
    _check_servable(head, "export_eagle3")
    return _write_eagle3(head, directory, layout, _aux_ids(head, aux_layer_ids))


def export_speculators(
    head: Eagle1Head | Eagle3Head,
    directory: str | Path,
    *,
    aux_layer_ids: Sequence[int] | None = None,
    verifier: str | None = None,
    speculative_tokens: int = 5,
) -> Path:
    """Export a head in the speculators format (vllm-project/speculators; vLLM serves the EAGLE-3 kind).

    EAGLE-3 (``speculators_model_type: "eagle3"``): ``fc.weight`` ``[H, 3*H_t]``, ``layers.0.*``, ``norm.weight``,
    ``lm_head.weight`` ``[V_draft, H]``, ``d2t`` ``[V_draft]``, ``t2d`` ``[V]`` (+ ``embed_tokens.weight`` ``[V, H]``
    when the head has its own or the widths differ); config with ``norm_before_residual: false`` written explicitly.
    EAGLE-1/2/HASS (``"eagle"``): ``fusion_fc.weight`` ``[H, 2H]`` (+ ``fusion_fc.bias``), ``transformer.*``.

    Args:
        head: the head.
        directory: output folder (created).
        aux_layer_ids: EAGLE-3 fused target layers in our (= vLLM's) convention; default the head config's.
        verifier: the target model's name or path (``speculators_config.verifier.name_or_path``), or None.
        speculative_tokens: the draft length of the greedy proposal method (vLLM's default number of tokens).

    Returns the folder.

    Raises:
        ValueError: a head the format cannot carry (EAGLE-1 with its own embedding or q/k/v biases: speculators'
            EAGLE-1 layer takes the verifier's embedding and a Llama layer whose ``attention_bias`` also biases
            ``o_proj``), or one a server would misread (see :func:`export_eagle3`).
    """
    dtype = _dtype_name(head)
    if isinstance(head, Eagle3Head):
        _check_servable(head, "export_speculators")
        ids = _aux_ids(head, aux_layer_ids)
        config = to_speculators_config(
            head.config,
            "eagle3",
            dtype=dtype,
            aux_layer_ids=ids,
            verifier=verifier,
            speculative_tokens=speculative_tokens,
        )
        return _write(directory, config, to_speculators_keys(_eagle3_state(head), "eagle3"))
    if not isinstance(head, Eagle1Head):
        raise TypeError(f"not an EAGLE head: {type(head).__name__}")
    if head.embed_tokens is not None:
        raise ValueError("export_speculators: the speculators EAGLE-1 format has no embedding (it uses the verifier's)")
    if head.config.qkv_bias:
        raise ValueError(
            "export_speculators: q/k/v biases cannot be written (a Llama layer with attention_bias also "
            "biases o_proj, which this head does not have)"
        )
    config = to_speculators_config(
        head.config, "eagle1", dtype=dtype, verifier=verifier, speculative_tokens=speculative_tokens
    )
    return _write(directory, config, to_speculators_keys(head.state_dict(), "eagle1"))


def save_draft_vocab(ids: torch.Tensor, directory: str | Path, vocab_size: int) -> Path:
    """Write an EAGLE-1/HASS head's draft shortlist (``[V_d]`` increasing target ids) beside its weights.

    Our own side file (``draft_vocab.safetensors``, key ``draft_to_target`` int32, metadata ``vocab_size``); official
    EAGLE-1 loaders ignore it and draft over the full vocabulary.
    """
    ids = check_draft_vocab(ids, vocab_size)
    path = Path(directory) / DRAFT_VOCAB_FILE
    state = {"draft_to_target": ids.to(torch.int32).contiguous()}
    save_file(state, str(path), metadata={"vocab_size": str(vocab_size)})
    return path


def _dtype_name(head: nn.Module) -> str:
    return str(head.fc.weight.dtype).removeprefix("torch.")


def _write(directory: str | Path, config: dict[str, Any], state: dict[str, torch.Tensor]) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    save_file({k: v.detach().cpu().contiguous() for k, v in state.items()}, str(directory / SAFETENSORS_FILE))
    return directory


def _write_eagle3(head: Eagle3Head, directory: str | Path, layout: str, ids: tuple[int, ...] | None) -> Path:
    """The official EAGLE-3 layouts: ``"sglang"`` (``midlayer.*``, ``t2d``) or ``"vllm"`` (``layers.0.*``)."""
    state = _eagle3_state(head)
    if layout == "vllm":
        state = to_vllm_keys(state)
    return _write(directory, official_config(head.config, "eagle3", _dtype_name(head), ids), state)


def _aux_ids(head: Eagle3Head, aux_layer_ids: Sequence[int] | None) -> tuple[int, ...] | None:
    ids = tuple(int(i) for i in aux_layer_ids) if aux_layer_ids is not None else head.config.aux_layer_ids
    if ids is not None and len(ids) != head.num_fused:
        raise ValueError(f"{len(ids)} aux layer ids for a head that fuses {head.num_fused} states")
    return ids


def _eagle3_state(head: Eagle3Head) -> dict[str, torch.Tensor]:
    """The head's tensors, plus the target embedding when the widths differ (every reader then wants the file's)."""
    state = dict(head.state_dict())
    if head.config.target_hidden_size != head.config.hidden_size and "embed_tokens.weight" not in state:
        # The official EAGLE code reads target_hidden_size as "the file carries its own embed_tokens.weight" (a
        # random one otherwise, silently); SGLang then keeps the draft's embedding instead of sharing the target's.
        if head.target_embedding is None:
            raise ValueError(
                f"this head's target_hidden_size ({head.config.target_hidden_size}) differs from its hidden_size "
                f"({head.config.hidden_size}), which the official EAGLE code reads as 'the file carries its own "
                "embed_tokens.weight'; attach the target's embedding first (head.attach_target_embedding(...)) so the "
                "export can include it"
            )
        state["embed_tokens.weight"] = head.target_embedding.detach().clone()
    return state


def _check_servable(head: Eagle1Head | Eagle3Head, what: str) -> None:
    """Refuse what a server would misread (the rules are tested in tests/test_checkpoint_consumers.py)."""
    if head.config.qkv_bias and isinstance(head, Eagle3Head):
        raise ValueError(
            f"{what}: this EAGLE-3 head has q/k/v biases; the official EAGLE code and SGLang build bias-free q/k/v "
            "projections (the biases would be dropped) and vLLM would also expect an o_proj bias"
        )
    if isinstance(head, Eagle3Head) and head.num_fused != 3:
        raise ValueError(f"{what}: this head fuses {head.num_fused} target states; servers fuse exactly 3")
