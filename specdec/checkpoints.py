"""Load, save and export EAGLE-1 / EAGLE-3 heads in the official checkpoint formats, with strict validation.

A checkpoint is a folder with ``config.json`` and ``model.safetensors`` or ``pytorch_model.bin``. Pickles are
read with ``torch.load(..., weights_only=True)``: a ``.bin`` can never execute code here.

Formats (EAGLE family reference, section 1):

* EAGLE-1 / EAGLE-2 / HASS: ``fc.*``, ``layers.0.{self_attn,mlp,post_attention_layernorm}.*``, optional
  ``embed_tokens.weight``; no ``input_layernorm``, no ``norm``, no ``lm_head``.
* EAGLE-3 (SGLang / SpecForge layout): ``fc.weight``, ``midlayer.*``, ``norm.weight``, ``lm_head.weight``,
  ``d2t``, ``t2d``. The vLLM layout (``layers.0.`` for ``midlayer.``, ``draft_id_to_target_id`` for ``d2t``,
  no ``t2d``) is accepted on load and written by ``export_eagle3(..., layout="vllm")``.

Quirks handled on load: ``bias`` absent in config means an ``fc`` bias (EAGLE-1); EAGLE-3 configs that claim more
than one hidden layer are corrected from the weights; ``d2t``/``t2d`` absent with ``draft_vocab_size ==
vocab_size`` mean the identity mapping (``t2d`` alone absent is rebuilt from ``d2t``); ``embed_tokens`` absent
means the target's embedding is used (attached when ``target_model`` is given).

Aux layer ids (EAGLE-3 fused target layers) are written twice because servers disagree on the convention:
top-level ``eagle_aux_hidden_state_layer_ids`` (vLLM: id ``i`` = *input* of decoder layer ``i``, our convention)
and ``eagle_config.eagle_aux_hidden_state_layer_ids`` (SGLang/SpecForge: id ``i`` = *output* of layer ``i``, i.e.
ours minus one). When the head uses the default ``(2, L//2, L-3)`` nothing is written and every server uses that
same default.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from specdec.drafters.eagle_modules import Eagle1Head, Eagle3Head, EagleConfig, check_draft_vocab, check_head_target

__all__ = [
    "CheckpointError",
    "load_eagle_head",
    "save_eagle_head",
    "export_eagle3",
    "read_weights",
    "load_draft_vocab",
    "save_draft_vocab",
]

CONFIG_FILE = "config.json"
DRAFT_VOCAB_FILE = "draft_vocab.safetensors"
SAFETENSORS_FILE = "model.safetensors"
PICKLE_FILE = "pytorch_model.bin"


class CheckpointError(ValueError):
    """A checkpoint cannot be read, or its keys/shapes/config do not describe a supported head."""


def _find_files(path: str | Path) -> tuple[Path, Path]:
    """``(config.json, weights file)`` for a checkpoint folder or a weights file inside one."""
    path = Path(path)
    if path.is_dir():
        folder, weights = path, None
        for name in (SAFETENSORS_FILE, PICKLE_FILE):
            if (path / name).is_file():
                weights = path / name
                break
        if weights is None:
            raise CheckpointError(f"{path} has neither {SAFETENSORS_FILE} nor {PICKLE_FILE}")
    elif path.is_file():
        folder, weights = path.parent, path
    else:
        raise CheckpointError(f"{path} does not exist")
    config = folder / CONFIG_FILE
    if not config.is_file():
        raise CheckpointError(f"{config} is missing")
    return config, weights


def read_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """Read a ``.safetensors`` file or a pickle with ``torch.load(weights_only=True)`` (never executes code)."""
    path = Path(path)
    try:
        if path.suffix == ".safetensors":
            state = load_file(str(path), device="cpu")
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a rejected pickle, a truncated file, ...
        raise CheckpointError(f"cannot read weights from {path}: {exc}") from exc
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{path} does not hold a flat dict of tensors")
    return state


def _is_eagle3(state: dict[str, torch.Tensor], config: EagleConfig) -> bool:
    keys = set(state)
    if keys & {"d2t", "t2d", "draft_id_to_target_id", "lm_head.weight", "norm.weight"}:
        return True
    if any(k.startswith("midlayer.") or k.endswith(".hidden_norm.weight") for k in keys):
        return True
    fc = state.get("fc.weight")
    return fc is not None and fc.ndim == 2 and fc.shape[1] != 2 * config.hidden_size


def _vllm_to_sglang(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = {}
    for key, value in state.items():
        if key.startswith("layers.0."):
            key = "midlayer." + key[len("layers.0.") :]
        elif key == "draft_id_to_target_id":
            key = "d2t"
        out[key] = value
    return out


def _validate(expected: dict[str, torch.Tensor], state: dict[str, torch.Tensor], where: Path) -> None:
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    mismatched = [
        f"{k}: checkpoint {tuple(state[k].shape)} vs expected {tuple(expected[k].shape)}"
        for k in sorted(set(state) & set(expected))
        if tuple(state[k].shape) != tuple(expected[k].shape)
    ]
    if missing or unexpected or mismatched:
        lines = [f"checkpoint {where} does not match the head its config describes:"]
        if missing:
            lines.append(f"  missing keys ({len(missing)}): " + ", ".join(missing))
        if unexpected:
            lines.append(f"  unexpected keys ({len(unexpected)}): " + ", ".join(unexpected))
        if mismatched:
            lines.append(f"  shape mismatches ({len(mismatched)}): " + "; ".join(mismatched))
        raise CheckpointError("\n".join(lines))


def load_eagle_head(
    path_or_dir: str | Path, target_model: nn.Module | None = None, dtype: torch.dtype | None = None
) -> Eagle1Head | Eagle3Head:
    """Load an EAGLE-1/2/HASS or EAGLE-3 head, auto-detecting the kind (EAGLE-3: ``midlayer.*`` keys, ``d2t``,
    ``lm_head``, or an ``fc`` wider than ``2H``).

    Args:
        path_or_dir: a checkpoint folder, or its weights file.
        target_model: optional HF target; checked for vocab/width compatibility and, when the head has no
            ``embed_tokens``, its embedding is attached (shared, not copied).
        dtype: parameter dtype; default: the checkpoint's ``fc.weight`` dtype.

    Raises:
        CheckpointError: unreadable files, or missing / unexpected / wrongly shaped keys (all listed in one error).
    """
    config_path, weights_path = _find_files(path_or_dir)
    try:
        raw: dict[str, Any] = json.loads(config_path.read_text())
        config = EagleConfig.from_hf(raw)
    except Exception as exc:
        raise CheckpointError(f"invalid {config_path}: {exc}") from exc
    state = read_weights(weights_path)
    eagle3 = _is_eagle3(state, config)
    if eagle3 and any(k.startswith("layers.0.") for k in state):
        state = _vllm_to_sglang(state)
    # The heads have one draft layer. Configs that claim more (some official EAGLE-3 releases) are corrected from
    # the weights: only layer-0 keys are expected, weights of any further layer are reported as unexpected keys.
    config = config.model_copy(update={"num_hidden_layers": 1})

    with_embedding = "embed_tokens.weight" in state
    if eagle3:
        fc = state.get("fc.weight")
        num_fused = None
        if fc is not None and fc.ndim == 2 and fc.shape[1] % config.target_hidden_size == 0:
            num_fused = fc.shape[1] // config.target_hidden_size
        head: Eagle1Head | Eagle3Head = Eagle3Head(config, with_embedding=with_embedding, num_fused=num_fused)
    else:
        head = Eagle1Head(config, with_embedding=with_embedding)
    expected = head.state_dict()

    if eagle3:
        if "d2t" not in state and config.draft_vocab_size == config.vocab_size:
            state["d2t"] = torch.zeros(config.draft_vocab_size, dtype=torch.long)  # identity mapping
        if "t2d" not in state and "d2t" in state and state["d2t"].shape == expected["d2t"].shape:
            ids = torch.arange(state["d2t"].shape[0]) + state["d2t"].long()
            if ids.numel() and (ids.min() < 0 or ids.max() >= config.vocab_size):
                raise CheckpointError(f"{weights_path}: d2t maps draft ids outside [0, {config.vocab_size})")
            t2d = torch.zeros(config.vocab_size, dtype=torch.bool)
            t2d[ids] = True
            state["t2d"] = t2d
    _validate(expected, state, weights_path)

    if eagle3:
        if state["d2t"].is_floating_point() or state["d2t"].dtype == torch.bool:
            raise CheckpointError(f"{weights_path}: d2t must be an integer tensor, got {state['d2t'].dtype}")
        state["d2t"] = state["d2t"].long()
        state["t2d"] = state["t2d"].bool()
        ids = torch.arange(config.draft_vocab_size) + state["d2t"]
        if ids.numel() and (ids.min() < 0 or ids.max() >= config.vocab_size):
            raise CheckpointError(f"{weights_path}: d2t maps draft ids outside [0, {config.vocab_size})")
    head.load_state_dict(state, strict=True)
    head.to(dtype or state["fc.weight"].dtype).eval()
    if target_model is not None:
        check_head_target(head, target_model)
        if head.embed_tokens is None:
            head.attach_target_embedding(target_model.get_input_embeddings().weight)
    return head


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


def load_draft_vocab(directory: str | Path, vocab_size: int) -> torch.Tensor | None:
    """The shortlist saved by :func:`save_draft_vocab` in ``directory`` (``[V_d]`` long), or None if there is none.

    Raises:
        CheckpointError: the file is unreadable, or was made for another vocabulary size, or holds invalid ids.
    """
    path = Path(directory) / DRAFT_VOCAB_FILE
    if not path.is_file():
        return None
    try:
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            ids = f.get_tensor("draft_to_target")
        if int(meta.get("vocab_size", vocab_size)) != vocab_size:
            raise ValueError(f"made for a vocabulary of {meta['vocab_size']}, the target has {vocab_size}")
        return check_draft_vocab(ids, vocab_size)
    except Exception as exc:
        raise CheckpointError(f"invalid draft vocabulary {path}: {exc}") from exc


def _dtype_name(head: nn.Module) -> str:
    return str(head.fc.weight.dtype).removeprefix("torch.")


def _write(directory: str | Path, config: dict[str, Any], state: dict[str, torch.Tensor]) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    save_file({k: v.detach().cpu().contiguous() for k, v in state.items()}, str(directory / SAFETENSORS_FILE))
    return directory


def save_eagle_head(head: Eagle1Head | Eagle3Head, directory: str | Path) -> Path:
    """Write ``config.json`` + ``model.safetensors`` in the official layout (EAGLE-3: the SGLang/SpecForge one).

    Returns the folder.
    """
    if isinstance(head, Eagle3Head):
        return export_eagle3(head, directory, layout="sglang")
    if not isinstance(head, Eagle1Head):
        raise TypeError(f"not an EAGLE head: {type(head).__name__}")
    config = head.config.to_hf("eagle1")
    config["torch_dtype"] = _dtype_name(head)
    return _write(directory, config, head.state_dict())


def export_eagle3(
    head: Eagle3Head,
    directory: str | Path,
    layout: str = "sglang",
    aux_layer_ids: Sequence[int] | None = None,
) -> Path:
    """Export an EAGLE-3 head servable by SGLang/SpecForge (``layout="sglang"``) or vLLM (``layout="vllm"``).

    Args:
        head: the head.
        directory: output folder (created).
        layout: ``"sglang"``: ``midlayer.*``, ``d2t``, ``t2d``; ``"vllm"``: ``layers.0.*``, ``draft_id_to_target_id``
            (same offsets as ``d2t``), no ``t2d`` (vLLM skips it).
        aux_layer_ids: fused target layers in our convention (input of layer ``i``); default the head config's,
            and if that is None too, none is written (servers then use ``(2, L//2, L-3)``, as we do).

    Returns the folder.
    """
    if not isinstance(head, Eagle3Head):
        raise TypeError(f"export_eagle3 needs an Eagle3Head, got {type(head).__name__}")
    if layout not in ("sglang", "vllm"):
        raise ValueError(f"layout must be 'sglang' or 'vllm', got {layout!r}")
    config = head.config.to_hf("eagle3")
    config["torch_dtype"] = _dtype_name(head)
    ids = tuple(aux_layer_ids) if aux_layer_ids is not None else head.config.aux_layer_ids
    if ids is not None:
        if len(ids) != head.num_fused:
            raise ValueError(f"{len(ids)} aux layer ids for a head that fuses {head.num_fused} states")
        config["eagle_aux_hidden_state_layer_ids"] = [int(i) for i in ids]
        config["eagle_config"] = {
            "eagle_aux_hidden_state_layer_ids": [int(i) - 1 for i in ids],
            "use_aux_hidden_state": True,
        }
    state = head.state_dict()
    if "target_hidden_size" in config and "embed_tokens.weight" not in state:
        # The official EAGLE loader then expects the head's own embedding and would otherwise run a random one.
        if head.target_embedding is None:
            raise ValueError(
                f"this head's target_hidden_size ({head.config.target_hidden_size}) differs from its hidden_size "
                f"({head.config.hidden_size}), which the official EAGLE code reads as 'the file carries its own "
                "embed_tokens.weight'; attach the target's embedding first (head.attach_target_embedding(...)) so the "
                "export can include it"
            )
        state["embed_tokens.weight"] = head.target_embedding.detach().clone()
    if layout == "vllm":
        renamed = {}
        for key, value in state.items():
            if key == "t2d":
                continue
            if key.startswith("midlayer."):
                key = "layers.0." + key[len("midlayer.") :]
            elif key == "d2t":
                key = "draft_id_to_target_id"
            renamed[key] = value
        state = renamed
    return _write(directory, config, state)
