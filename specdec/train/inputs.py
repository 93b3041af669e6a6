"""What a run trains on: the target, its sequences (ShareGPT or self-distilled) and their cached target features.

:func:`load_data` picks the sequences, :func:`cache_features` runs the frozen target over them once (or reuses the
cache, or features captured during generation), and :func:`open_stores` opens the cache for training.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from specdec.train.captured import CapturedFeatures
from specdec.train.config import TrainConfig
from specdec.train.data import TokenDataset, load_sharegpt
from specdec.train.features import FeatureSpec, FeatureStore, eagle3_layers, extract_features
from specdec.train.shards import load_regenerated

__all__ = ["Rows", "cache_features", "feature_spec", "load_data", "load_target", "open_stores"]

Rows = Sequence[dict[str, torch.Tensor]]


def load_target(name: str, device: torch.device) -> tuple[Any, Any]:
    """``(model, tokenizer)`` of ``name`` (specdec.models.load_model): bf16 on a GPU, fp32 on the CPU."""
    from specdec.models import load_model

    return load_model(name, device=device, dtype=torch.bfloat16 if device.type == "cuda" else torch.float32)


def feature_spec(config: TrainConfig, num_layers: int) -> FeatureSpec:
    """The target features the recipe trains on: the final hidden state, and for EAGLE-3 the fused layers' inputs."""
    if config.recipe != "eagle3":
        return FeatureSpec(final=True)
    return FeatureSpec(final=True, layers=tuple(config.head.eagle3_layers or eagle3_layers(num_layers)))


def load_data(
    config: TrainConfig, tokenizer: Any, train_data: Sequence[Any] | None, heldout_data: Sequence[Any] | None
) -> tuple[Sequence[Any], Sequence[Any]]:
    """``(train, heldout)`` sequences: those given, else the self-distilled ``data_dir`` (training only) and ShareGPT.

    Training takes sequences ``skip_sequences … skip_sequences + max_conversations`` of its source.
    """
    data = config.data
    if train_data is None and data.data_dir:
        regenerated = load_regenerated(data.data_dir, max_len=data.max_len)
        train_data = _window(regenerated, data.skip_sequences, data.max_conversations)
    if train_data is None or heldout_data is None:
        if tokenizer is None:
            raise ValueError("building ShareGPT data needs the target's tokenizer")
        sharegpt_train, sharegpt_heldout = load_sharegpt(
            tokenizer,
            max_conversations=0 if train_data is not None else _plus(data.max_conversations, data.skip_sequences),
            max_len=data.max_len,
            heldout_fraction=data.heldout_fraction,
            max_heldout=data.max_heldout,
            seed=data.data_seed,
        )
        if train_data is None:
            train_data = _window(sharegpt_train, data.skip_sequences, None)
        heldout_data = sharegpt_heldout if heldout_data is None else heldout_data
    return train_data, heldout_data


def _plus(limit: int | None, skip: int) -> int | None:
    return None if limit is None else limit + skip


def _window(data: TokenDataset, skip: int, limit: int | None) -> TokenDataset:
    """Sequences ``skip … skip + limit`` of ``data``; refuses a skip that leaves nothing to train on."""
    if skip >= len(data):
        raise ValueError(f"skip_sequences={skip} leaves none of the {len(data)} training sequences")
    return TokenDataset(data.examples[skip : _plus(limit, skip)])


def cache_features(
    config: TrainConfig,
    target: Any,
    train_data: Sequence[Any],
    heldout_data: Sequence[Any],
    spec: FeatureSpec,
    folder: Path,
) -> None:
    """Extract (or reuse) the target features of both splits into ``folder/{train,heldout}``; training sequences
    found in ``data.captured_features`` take the features captured during generation."""
    dtype = getattr(torch, config.data.feature_dtype)
    captured = None
    if config.data.captured_features is not None:
        captured = CapturedFeatures(config.data.captured_features, target, spec, dtype, max_len=config.data.max_len)
    for split, data in (("train", train_data), ("heldout", heldout_data)):
        extract_features(
            target,
            data,
            folder / split,
            spec,
            dtype=dtype,
            batch_size=config.data.extract_batch_size,
            progress=config.run.progress,
            desc=f"target features ({split})",
            captured=captured if split == "train" else None,
        )


def open_stores(folder: Path, spec: FeatureSpec, train_sequences: int | None) -> tuple[Rows, FeatureStore]:
    """``(train rows, held-out store)`` of the feature cache; training keeps its first ``train_sequences`` rows."""
    train_rows: Rows = FeatureStore(folder / "train", spec)
    heldout = FeatureStore(folder / "heldout", spec)
    if train_sequences is not None:
        if train_sequences > len(train_rows):
            raise ValueError(f"train_sequences={train_sequences} but the cache holds {len(train_rows)}")
        train_rows = _Prefix(train_rows, train_sequences)
    if len(train_rows) == 0:
        raise ValueError("no training sequences")
    return train_rows, heldout


class _Prefix(Sequence[dict[str, torch.Tensor]]):
    """The first ``n`` items of a feature store."""

    def __init__(self, store: Rows, n: int) -> None:
        self.store, self.n = store, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):  # type: ignore[override]
        if not 0 <= i < self.n:
            raise IndexError(i)
        return self.store[i]
