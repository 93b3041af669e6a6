"""Target features captured while the self-distilled data was generated, found again by sequence content.

Generation already runs the target over every token (:mod:`specdec.train.continuous`), so with a capture folder
``specdec data regenerate`` keeps the features a head trains on instead of leaving them to a second forward
(:func:`~specdec.train.features.extract_features`). Extraction then takes a sequence's features from the capture
folder when it holds that exact sequence and runs the target only for the others, so a training window may start
and end anywhere and a folder captured for part of the data still helps.

Layout of a capture folder::

    capture.json               version, spec (final + layers), dtype, target (the weights sample of
                               :mod:`specdec.train.features`), hidden size
    shard-00058.safetensors    per data shard: input_ids [N] int64, lengths [n] int64, final [N, H], fused [N, kH]
                               (the shard's sequences in order, prompt + response)

Each capture file repeats ``capture.json`` in its safetensors metadata; a file whose settings differ from the folder's
is refused by name (a folder reset by hand cannot serve old files as new). A capture file is written before its data
shard enters the data manifest. Sequences are keyed by the sha256 of their int64 token ids, so a lookup never returns
another sequence's features; a sequence that training truncates to ``max_len`` is found by its prefix. Captured
features equal a separate forward's up to float rounding of the batched forward (tested). Captures come from the
target as generation runs it (fp32 on the CPU) and serve extraction with that same target only.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from specdec.errors import SpecdecError
from specdec.train.features import FeatureSpec, _covers, _target_sample

__all__ = ["CaptureError", "CaptureSettings", "CapturedFeatures", "write_captured"]

CAPTURE = "capture.json"
VERSION = 1
_SETTINGS_KEYS = {"version", "spec", "dtype", "target", "target_dtype", "hidden_size"}


class CaptureError(SpecdecError, ValueError):
    """A capture folder or file that cannot serve this extraction (named in the message)."""


def _key(ids: torch.Tensor) -> str:
    return hashlib.sha256(ids.to(torch.int64).contiguous().numpy().tobytes()).hexdigest()


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _settings(model: Any, spec: FeatureSpec, dtype: torch.dtype) -> dict[str, Any]:
    return {
        "version": VERSION,
        "spec": {"final": spec.final, "layers": list(spec.layers)},
        "dtype": _name(dtype),
        "target": _target_sample(model),
        "target_dtype": _name(model.get_input_embeddings().weight.dtype),
        "hidden_size": int(model.config.get_text_config().hidden_size),
    }


class CaptureSettings:
    """Where and what a generation run captures; checks a folder's earlier settings.

    Raises:
        CaptureError: the folder was captured with another spec, dtype or target.
    """

    def __init__(self, folder: str | Path, model: Any, spec: FeatureSpec, dtype: torch.dtype = torch.bfloat16):
        self.folder, self.spec, self.dtype = Path(folder), spec, dtype
        self.folder.mkdir(parents=True, exist_ok=True)
        self.settings = _settings(model, spec, dtype)
        path = self.folder / CAPTURE
        if path.is_file():
            theirs = json.loads(path.read_text())
            if theirs != self.settings:
                raise CaptureError(
                    f"{self.folder} holds features captured with {theirs}, this run asks for {self.settings}"
                )
        else:
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(json.dumps(self.settings, indent=1) + "\n")
            tmp.replace(path)


def write_captured(
    settings: CaptureSettings,
    name: str,
    sequences: list[tuple[list[int], torch.Tensor | None, torch.Tensor | None]],
) -> Path:
    """Write one data shard's captured features: ``(token ids, final [T, H], fused [T, kH])`` per sequence.

    Raises:
        CaptureError: a sequence's features do not have one row per token, or a wanted feature is missing.
    """
    for ids, final, fused in sequences:
        for feature, wanted in ((final, settings.spec.final), (fused, bool(settings.spec.layers))):
            if wanted and (feature is None or feature.shape[0] != len(ids)):
                raise CaptureError(f"captured features of {name} do not have one row per token of every sequence")
    tensors = {
        "input_ids": torch.tensor([t for ids, _, _ in sequences for t in ids], dtype=torch.int64),
        "lengths": torch.tensor([len(ids) for ids, _, _ in sequences], dtype=torch.int64),
    }
    for i, key, wanted in ((1, "final", settings.spec.final), (2, "fused", bool(settings.spec.layers))):
        if wanted:
            tensors[key] = torch.cat([seq[i] for seq in sequences]).to(settings.dtype).contiguous()  # type: ignore[misc]
    path = settings.folder / name
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp), metadata={"capture": json.dumps(settings.settings, sort_keys=True)})
    tmp.replace(path)
    return path


class CapturedFeatures:
    """Look up captured features by sequence (see the module docstring).

    Args:
        folder: a capture folder.
        target: the target extraction would run; refused if the features came from other weights or the same
            weights in another dtype.
        spec: the features wanted (the folder's must cover them).
        dtype: the storage dtype wanted (must be the folder's).
        max_len: extraction truncates sequences to this length: a longer captured sequence is also found by its
            first ``max_len`` tokens.

    Raises:
        CaptureError: no capture folder (or one of an earlier format), other target or dtype, a spec the folder
            does not cover, or a capture file whose settings or shapes are not the folder's (named).
    """

    def __init__(
        self, folder: str | Path, target: Any, spec: FeatureSpec, dtype: torch.dtype, max_len: int | None = None
    ) -> None:
        self.folder = Path(folder)
        path = self.folder / CAPTURE
        if not path.is_file():
            raise CaptureError(f"{self.folder} is not a capture folder (no {CAPTURE})")
        meta = json.loads(path.read_text())
        if meta.get("version") != VERSION or set(meta) != _SETTINGS_KEYS:
            raise CaptureError(
                f"{path} is of another capture format than version {VERSION} (keys {sorted(_SETTINGS_KEYS)}): "
                "captured by an earlier specdec; capture again or extract the features"
            )
        stored = FeatureSpec(final=meta["spec"]["final"], layers=tuple(meta["spec"]["layers"]))
        theirs = _name(target.get_input_embeddings().weight.dtype)
        if meta["target_dtype"] != theirs:
            raise CaptureError(
                f"features in {self.folder} were captured from the target in {meta['target_dtype']}, extraction "
                f"runs it in {theirs}: captures serve extraction with the target as generation ran it (fp32, CPU)"
            )
        if meta["target"] != _target_sample(target):
            raise CaptureError(f"features in {self.folder} were captured from another target (weights sample differs)")
        if meta["dtype"] != _name(dtype):
            raise CaptureError(f"features in {self.folder} are {meta['dtype']}, extraction asks for {_name(dtype)}")
        if not _covers(stored, spec):
            raise CaptureError(f"features in {self.folder} hold {stored}, which does not cover {spec}")
        self.spec = spec
        hidden = int(meta["hidden_size"])
        widths = {"final": hidden if stored.final else None, "fused": hidden * len(stored.layers) or None}
        self._where: dict[str, tuple[Path, int, int]] = {}
        for file in sorted(self.folder.glob("shard-*.safetensors")):
            with safe_open(str(file), framework="pt") as f:
                written = f.metadata() or {}
                if json.loads(written.get("capture", "null")) != meta:
                    raise CaptureError(f"capture file {file} was written with other settings than {path}")
                for key, width in widths.items():
                    if width is not None and f.get_slice(key).get_shape()[1:] != [width]:
                        raise CaptureError(f"capture file {file}: {key} is not {width} wide")
                ids, lengths = f.get_tensor("input_ids"), f.get_tensor("lengths").tolist()
            offset = 0
            for n in lengths:
                self._where[_key(ids[offset : offset + n])] = (file, offset, n)
                if max_len is not None and n > max_len:
                    self._where.setdefault(_key(ids[offset : offset + max_len]), (file, offset, max_len))
                offset += n

    def __len__(self) -> int:
        return len(self._where)

    def get(self, input_ids: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None] | None:
        """``(final [T, H], fused [T, kH])`` of this exact sequence in the wanted spec, or None if not captured."""
        where = self._where.get(_key(input_ids))
        if where is None:
            return None
        file, offset, n = where
        with safe_open(str(file), framework="pt") as f:
            final = f.get_slice("final")[offset : offset + n] if self.spec.final else None
            fused = f.get_slice("fused")[offset : offset + n] if self.spec.layers else None
        return final, fused
