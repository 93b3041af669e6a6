"""Load, save and export EAGLE-1 / EAGLE-3 heads in the official checkpoint formats, with strict validation.

A checkpoint is a folder with ``config.json`` and ``model.safetensors`` or ``pytorch_model.bin``, or weights sharded
over several files listed by ``model.safetensors.index.json`` / ``pytorch_model.bin.index.json`` (a ``weight_map`` of
tensor name -> shard file). Pickles are read with ``torch.load(..., weights_only=True)``: a ``.bin`` can never
execute code here.

Formats (EAGLE family reference, section 1):

* EAGLE-1 / EAGLE-2 / HASS: ``fc.*``, ``layers.0.{self_attn,mlp,post_attention_layernorm}.*``, optional
  ``embed_tokens.weight``; no ``input_layernorm``, no ``norm``, no ``lm_head``.
* EAGLE-3 (SGLang / SpecForge layout): ``fc.weight``, ``midlayer.*``, ``norm.weight``, ``lm_head.weight``,
  ``d2t``, ``t2d``. The vLLM layout (``layers.0.`` for ``midlayer.``, no ``t2d``) is accepted on load and written
  by ``export_eagle3(..., layout="vllm")``; its vocabulary map is ``d2t`` too (vLLM renames it internally and
  silently ignores a file key named ``draft_id_to_target_id``, which older exports wrote and the loader still reads).
* speculators (vllm-project/speculators, served by vLLM): a ``config.json`` with ``speculators_model_type``
  (``eagle`` / ``eagle3``), ``transformer_layer_config`` and ``speculators_config``; key maps and config translation
  in :mod:`specdec.checkpoint_formats`. Written by :func:`export_speculators`.

Quirks handled on load: ``bias`` absent in config means an ``fc`` bias (EAGLE-1); EAGLE-3 configs that claim more
than one hidden layer are corrected from the weights; ``d2t``/``t2d`` absent with ``draft_vocab_size ==
vocab_size`` mean the identity mapping (``t2d`` alone absent is rebuilt from ``d2t``); ``embed_tokens`` absent
means the target's embedding is used (attached when ``target_model`` is given).

Aux layer ids (EAGLE-3 fused target layers) are written twice because servers disagree on the convention:
top-level ``eagle_aux_hidden_state_layer_ids`` (vLLM: id ``i`` = *input* of decoder layer ``i``, our convention)
and ``eagle_config.eagle_aux_hidden_state_layer_ids`` (SGLang/SpecForge: id ``i`` = *output* of layer ``i``, i.e.
ours minus one). When the head uses the default ``(2, L//2, L-3)`` nothing is written and every server uses that
same default (the official EAGLE code always uses it).

:func:`save_eagle_head` writes any head our loader reads back. :func:`export_eagle3` and :func:`export_speculators`
also refuse heads a server would misread (``tests/test_checkpoint_consumers.py`` applies each server's loading rules
to the exported folder): q/k/v biases (the official EAGLE-3 code and SGLang build bias-free projections and drop
them; vLLM then also expects an ``o_proj`` bias our heads do not have) and a fused-state count other than three.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from specdec.checkpoint_formats import (
    export_rope_scaling,
    from_speculators_config,
    from_speculators_keys,
    is_speculators_config,
    to_speculators_config,
    to_speculators_keys,
)
from specdec.drafters.eagle_modules import Eagle1Head, Eagle3Head, EagleConfig, check_draft_vocab, check_head_target

__all__ = [
    "CheckpointError",
    "load_eagle_head",
    "save_eagle_head",
    "export_eagle3",
    "export_speculators",
    "read_weights",
    "load_draft_vocab",
    "save_draft_vocab",
]

CONFIG_FILE = "config.json"
DRAFT_VOCAB_FILE = "draft_vocab.safetensors"
SAFETENSORS_FILE = "model.safetensors"
PICKLE_FILE = "pytorch_model.bin"
SAFETENSORS_INDEX = "model.safetensors.index.json"
PICKLE_INDEX = "pytorch_model.bin.index.json"
# Looked for in this order (safetensors before pickles, as transformers does).
WEIGHT_FILES = (SAFETENSORS_FILE, SAFETENSORS_INDEX, PICKLE_FILE, PICKLE_INDEX)
EXPORT_LAYOUTS = ("sglang", "vllm", "speculators")


class CheckpointError(ValueError):
    """A checkpoint cannot be read, or its keys/shapes/config do not describe a supported head."""


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
    ``lm_head``, or an ``fc`` wider than ``2H``; a speculators config names it).

    Reads the official layouts, the vLLM layout and the speculators format, single-file or sharded.

    Args:
        path_or_dir: a checkpoint folder, or its weights file (or shard index).
        target_model: optional HF target; checked for vocab/width compatibility and, when the head has no
            ``embed_tokens``, its embedding is attached (shared, not copied).
        dtype: parameter dtype; default: the checkpoint's ``fc.weight`` dtype.

    Returns:
        An :class:`~specdec.drafters.eagle_modules.Eagle1Head` or :class:`~specdec.drafters.eagle_modules.Eagle3Head`
        in eval mode.

    Raises:
        CheckpointError: unreadable files, a malformed shard index, a config variant our heads do not represent, or
            missing / unexpected / wrongly shaped keys (all listed in one error).
    """
    config_path, weights_path = _find_files(path_or_dir)
    kind: str | None = None  # named by a speculators config, else detected from the weights
    try:
        raw: dict[str, Any] = json.loads(config_path.read_text())
        if is_speculators_config(raw):
            kind, raw = from_speculators_config(raw)
        if raw.get("norm_before_residual"):
            raise ValueError("norm_before_residual is true; our EAGLE-3 head keeps the un-normalised hidden state")
        config = EagleConfig.from_hf(raw)
    except Exception as exc:
        raise CheckpointError(f"invalid {config_path}: {exc}") from exc
    state = read_weights(weights_path)
    if kind is not None:
        state = from_speculators_keys(state, kind)
    eagle3 = _is_eagle3(state, config) if kind is None else kind == "eagle3"
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
        if ids.unique().numel() != ids.numel():
            raise CheckpointError(f"{weights_path}: d2t maps two draft ids to the same target token")
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


def _official_config(head: Eagle1Head | Eagle3Head, kind: str) -> dict[str, Any]:
    config = head.config.to_hf(kind)
    config["torch_dtype"] = _dtype_name(head)
    config["rope_scaling"] = export_rope_scaling(config.get("rope_scaling"))
    return config


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


def _official_eagle3(head: Eagle3Head, layout: str, ids: tuple[int, ...] | None) -> tuple[dict, dict]:
    config = _official_config(head, "eagle3")
    if ids is not None:
        config["eagle_aux_hidden_state_layer_ids"] = list(ids)
        config["eagle_config"] = {
            "eagle_aux_hidden_state_layer_ids": [i - 1 for i in ids],
            "use_aux_hidden_state": True,
        }
    state = _eagle3_state(head)
    if layout == "vllm":
        state = {
            ("layers.0." + k[len("midlayer.") :] if k.startswith("midlayer.") else k): v
            for k, v in state.items()
            if k != "t2d"  # vLLM skips it
        }
    return config, state


def _check_servable(head: Eagle1Head | Eagle3Head, what: str) -> None:
    """Refuse what a server would misread (the rules are tested in tests/test_checkpoint_consumers.py)."""
    if head.config.qkv_bias and isinstance(head, Eagle3Head):
        raise ValueError(
            f"{what}: this EAGLE-3 head has q/k/v biases; the official EAGLE code and SGLang build bias-free q/k/v "
            "projections (the biases would be dropped) and vLLM would also expect an o_proj bias"
        )
    if isinstance(head, Eagle3Head) and head.num_fused != 3:
        raise ValueError(f"{what}: this head fuses {head.num_fused} target states; servers fuse exactly 3")


def save_eagle_head(head: Eagle1Head | Eagle3Head, directory: str | Path) -> Path:
    """Write ``config.json`` + ``model.safetensors`` in the official layout (EAGLE-3: the SGLang/SpecForge one).

    Writes any head :func:`load_eagle_head` reads back (q/k/v biases, any number of fused states); to hand a head to
    a server use :func:`export_eagle3` / :func:`export_speculators`, which refuse what the server would misread.
    Tensors: the head's state dict (see :class:`~specdec.drafters.eagle_modules.Eagle1Head` and
    :class:`~specdec.drafters.eagle_modules.Eagle3Head`; e.g. EAGLE-3 ``fc.weight`` ``[H, 3*H_t]``,
    ``lm_head.weight`` ``[V_draft, H]``, ``d2t`` ``[V_draft]``).

    Returns the folder.
    """
    if isinstance(head, Eagle3Head):
        return _write(directory, *_official_eagle3(head, "sglang", _aux_ids(head, None)))
    if not isinstance(head, Eagle1Head):
        raise TypeError(f"not an EAGLE head: {type(head).__name__}")
    return _write(directory, _official_config(head, "eagle1"), head.state_dict())


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
    return _write(directory, *_official_eagle3(head, layout, _aux_ids(head, aux_layer_ids)))


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
