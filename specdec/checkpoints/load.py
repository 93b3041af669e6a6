"""Read EAGLE-1 / EAGLE-3 heads from checkpoint folders, with strict key and shape validation.

:func:`load_eagle_head` reads the official layouts, the vLLM layout and the speculators format
(:mod:`specdec.checkpoints.formats`, :mod:`specdec.checkpoints.speculators`), single-file or sharded. Pickles are read
with ``torch.load(..., weights_only=True)``: a ``.bin`` can never execute code here. The reference loader uses
``strict=False`` and silently ignores missing keys; here every key and shape is checked against the head the config
describes, and every problem is listed in one :class:`CheckpointError`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file
from torch import nn

from specdec.checkpoints.formats import (
    CONFIG_FILE,
    DRAFT_VOCAB_FILE,
    PICKLE_FILE,
    PICKLE_INDEX,
    SAFETENSORS_FILE,
    SAFETENSORS_INDEX,
    WEIGHT_FILES,
    complete_vocab_map,
    from_vllm_keys,
    is_eagle3,
)
from specdec.checkpoints.speculators import from_speculators_config, from_speculators_keys, is_speculators_config
from specdec.eagle.checks import check_draft_vocab, check_head_target
from specdec.eagle.config import EagleConfig
from specdec.eagle.heads import Eagle1Head, Eagle3Head
from specdec.errors import SpecdecError

__all__ = ["CheckpointError", "load_eagle_head", "load_draft_vocab", "read_weights"]


class CheckpointError(SpecdecError, ValueError):
    """A checkpoint cannot be read, or its keys/shapes/config do not describe a supported head."""


def load_eagle_head(
    path_or_dir: str | Path, target_model: nn.Module | None = None, dtype: torch.dtype | None = None
) -> Eagle1Head | Eagle3Head:
    """Load an EAGLE-1/2/HASS or EAGLE-3 head, auto-detecting the kind (EAGLE-3: ``midlayer.*`` keys, ``d2t``,
    ``lm_head``, or an ``fc`` wider than ``2H``; a speculators config names it).

    Args:
        path_or_dir: a checkpoint folder, or its weights file (or shard index).
        target_model: optional HF target; checked for vocab/width compatibility and, when the head has no
            ``embed_tokens``, its embedding is attached (shared, not copied).
        dtype: parameter dtype; default: the checkpoint's ``fc.weight`` dtype.

    Returns:
        An :class:`~specdec.eagle.heads.Eagle1Head` or :class:`~specdec.eagle.heads.Eagle3Head`
        in eval mode.

    Raises:
        CheckpointError: unreadable files, a malformed shard index, a config variant our heads do not represent, a
            ``draft_id_to_target_id`` key, missing / unexpected / wrongly shaped keys (all listed in one error), or
            NaN or infinite weights.
    """
    config_path, weights_path = _find_files(path_or_dir)
    kind, config = _read_config(config_path)
    state = read_weights(weights_path)
    if "draft_id_to_target_id" in state:
        raise CheckpointError(
            f"{weights_path} holds draft_id_to_target_id, vLLM's in-memory name for d2t, which no reader takes from a "
            "file (vLLM skips it and drafts with the identity map); rename the tensor to d2t"
        )
    if kind is not None:
        state = from_speculators_keys(state, kind)
    eagle3 = is_eagle3(state, config.hidden_size) if kind is None else kind == "eagle3"
    if eagle3 and any(k.startswith("layers.0.") for k in state):
        state = from_vllm_keys(state)
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
        try:
            state = complete_vocab_map(state, config.draft_vocab_size, config.vocab_size)
        except ValueError as exc:
            raise CheckpointError(f"{weights_path}: {exc}") from exc
    else:
        head = Eagle1Head(config, with_embedding=with_embedding)
    _validate(head.state_dict(), state, weights_path)
    if eagle3:
        _check_vocab_map(state, config, weights_path)
    head.load_state_dict(state, strict=True)
    head.to(dtype or state["fc.weight"].dtype).eval()
    if target_model is not None:
        check_head_target(head, target_model)
        if head.embed_tokens is None:
            head.attach_target_embedding(target_model.get_input_embeddings().weight)
    return head


def load_draft_vocab(directory: str | Path, vocab_size: int) -> torch.Tensor | None:
    """The shortlist saved by :func:`~specdec.checkpoints.export.save_draft_vocab` in ``directory`` (``[V_d]`` long),
    or None if there is none.

    Raises:
        CheckpointError: the file is unreadable, has no ``vocab_size`` metadata, was made for another vocabulary
            size, or holds invalid ids.
    """
    path = Path(directory) / DRAFT_VOCAB_FILE
    if not path.is_file():
        return None
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            ids = f.get_tensor("draft_to_target")
        if "vocab_size" not in meta:
            raise ValueError("no vocab_size in its metadata (save_draft_vocab writes it)")
        if int(meta["vocab_size"]) != vocab_size:
            raise ValueError(f"made for a vocabulary of {meta['vocab_size']}, the target has {vocab_size}")
        return check_draft_vocab(ids, vocab_size)
    except Exception as exc:
        raise CheckpointError(f"invalid draft vocabulary {path}: {exc}") from exc


def read_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """Read a ``.safetensors`` file, a pickle with ``torch.load(weights_only=True)`` (never executes code), or every
    shard listed by a ``*.index.json`` (``{"weight_map": {tensor name: shard file}}``, shards beside the index).

    Returns:
        ``{name: tensor}`` on the CPU, shapes as stored.

    Raises:
        CheckpointError: an unreadable file; a malformed index; an index naming a missing shard; a shard lacking a
            tensor the index promises (or holding one it does not list). The message names the file.
    """
    path = Path(path)
    if path.name.endswith(".index.json"):
        return _read_sharded(path)
    return _read_single(path)


def _find_files(path: str | Path) -> tuple[Path, Path]:
    """``(config.json, weights file or shard index)`` for a checkpoint folder or a weights file inside one."""
    path = Path(path)
    if path.is_dir():
        folder, weights = path, None
        for name in WEIGHT_FILES:
            if (path / name).is_file():
                weights = path / name
                break
        if weights is None:
            raise CheckpointError(
                f"{path} has neither {SAFETENSORS_FILE} nor {PICKLE_FILE} (nor a shard index {SAFETENSORS_INDEX} / "
                f"{PICKLE_INDEX})"
            )
    elif path.is_file():
        folder, weights = path.parent, path
    else:
        raise CheckpointError(f"{path} does not exist")
    config = folder / CONFIG_FILE
    if not config.is_file():
        raise CheckpointError(f"{config} is missing")
    return config, weights


def _read_config(path: Path) -> tuple[str | None, EagleConfig]:
    """``(kind, config)``: the kind a speculators config names (else None: detected from the weights) and the head
    config, official quirks applied."""
    kind: str | None = None
    try:
        raw: dict[str, Any] = json.loads(path.read_text())
        if is_speculators_config(raw):
            kind, raw = from_speculators_config(raw)
        if raw.get("norm_before_residual"):
            raise ValueError("norm_before_residual is true; our EAGLE-3 head keeps the un-normalised hidden state")
        return kind, EagleConfig.from_hf(raw)
    except Exception as exc:
        raise CheckpointError(f"invalid {path}: {exc}") from exc


def _read_sharded(index: Path) -> dict[str, torch.Tensor]:
    try:
        data = json.loads(index.read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"cannot read shard index {index}: {exc}") from exc
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if (
        not isinstance(weight_map, dict)
        or not weight_map
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items())
    ):
        raise CheckpointError(
            f'malformed shard index {index}: expected a non-empty "weight_map" object of tensor name -> shard file'
        )
    by_shard: dict[str, set[str]] = {}
    for key, shard in weight_map.items():
        by_shard.setdefault(shard, set()).add(key)
    for shard in sorted(by_shard):  # every shard is checked before any is read
        if Path(shard).name != shard or shard in ("", ".", ".."):  # shards lie beside the index, nowhere else
            raise CheckpointError(f"malformed shard index {index}: {shard!r} is not a file name in {index.parent}")
        if not (index.parent / shard).is_file():
            raise CheckpointError(f"{index} names shard {shard}, which is missing from {index.parent}")
    state: dict[str, torch.Tensor] = {}
    for shard, keys in sorted(by_shard.items()):
        shard_path = index.parent / shard
        tensors = _read_single(shard_path)
        absent = sorted(keys - set(tensors))
        if absent:
            raise CheckpointError(f"shard {shard_path} lacks {', '.join(absent)}, which {index.name} promises")
        unlisted = sorted(set(tensors) - keys)
        if unlisted:
            raise CheckpointError(f"shard {shard_path} holds {', '.join(unlisted)}, which {index.name} does not list")
        state.update(tensors)
    return state


def _read_single(path: Path) -> dict[str, torch.Tensor]:
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


def _validate(expected: dict[str, torch.Tensor], state: dict[str, torch.Tensor], where: Path) -> None:
    """Raise one :class:`CheckpointError` listing every missing, unexpected and wrongly shaped key."""
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
            lines.append(f"  missing keys ({len(missing)}): " + _first(missing, ", "))
        if unexpected:
            lines.append(f"  unexpected keys ({len(unexpected)}): " + _first(unexpected, ", "))
        if mismatched:
            lines.append(f"  shape mismatches ({len(mismatched)}): " + _first(mismatched, "; "))
        raise CheckpointError("\n".join(lines))
    maps = {"d2t", "t2d"}  # EAGLE-3's vocabulary maps are integer and bool; every other tensor is a weight
    wrong = [f"{k} ({v.dtype})" for k, v in sorted(state.items()) if k not in maps and not v.is_floating_point()]
    if wrong:
        raise CheckpointError(f"checkpoint {where} holds weights that are not floating point: {_first(wrong)}")
    bad = [k for k, v in sorted(state.items()) if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:
        raise CheckpointError(f"checkpoint {where} holds NaN or infinite values in {len(bad)} tensor(s): {_first(bad)}")


def _first(items: list[str], sep: str = ", ", shown: int = 12) -> str:
    """The first ``shown`` of ``items`` joined, and how many more there are (a whole model's keys in one error)."""
    more = f"{sep}... and {len(items) - shown} more" if len(items) > shown else ""
    return sep.join(items[:shown]) + more


def _check_vocab_map(state: dict[str, torch.Tensor], config: EagleConfig, where: Path) -> None:
    """Check an EAGLE-3 ``d2t`` (integer, one distinct target id in range per draft id) and cast ``d2t``/``t2d`` in
    place to the buffers' dtypes (int64, bool)."""
    if state["d2t"].is_floating_point() or state["d2t"].dtype == torch.bool:
        raise CheckpointError(f"{where}: d2t must be an integer tensor, got {state['d2t'].dtype}")
    state["d2t"] = state["d2t"].long()
    state["t2d"] = state["t2d"].bool()
    ids = torch.arange(config.draft_vocab_size) + state["d2t"]
    if ids.numel() and (ids.min() < 0 or ids.max() >= config.vocab_size):
        raise CheckpointError(f"{where}: d2t maps draft ids outside [0, {config.vocab_size})")
    if ids.unique().numel() != ids.numel():
        raise CheckpointError(f"{where}: d2t maps two draft ids to the same target token")
    expected = torch.zeros(config.vocab_size, dtype=torch.bool)
    expected[ids] = True
    if not torch.equal(state["t2d"], expected):  # t2d picks the draft vocabulary's slots in EAGLE-3 training
        differ = int((state["t2d"] != expected).sum())
        raise CheckpointError(
            f"{where}: t2d disagrees with d2t on {differ} target token(s): t2d must mark exactly the tokens d2t maps to"
        )
