"""Training EAGLE-1 / HASS / EAGLE-3 draft heads (CPU single process, or multi-GPU with ``accelerate launch``).

Python API::

    from specdec.train import TrainConfig, train
    head_dir = train(TrainConfig(recipe="hass", out="runs/hass", max_conversations=200, max_len=512))

Parts: :mod:`~specdec.train.data` (ShareGPT → chat template → assistant loss mask), :mod:`~specdec.train.features`
(cached target features), :mod:`~specdec.train.masks` (HASS / TTT attention biases), :mod:`~specdec.train.losses`,
:mod:`~specdec.train.recipes`, :mod:`~specdec.train.draft_vocab`, :mod:`~specdec.train.evaluate`,
:mod:`~specdec.train.trainer`, :mod:`~specdec.train.cli`. Heavy imports (accelerate, the heads) are deferred.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TrainConfig", "train", "TokenDataset", "load_sharegpt", "chain_acceptance"]


def __getattr__(name: str) -> Any:
    if name in ("TrainConfig", "train"):
        from specdec.train import trainer

        return getattr(trainer, name)
    if name in ("TokenDataset", "load_sharegpt"):
        from specdec.train import data

        return getattr(data, name)
    if name == "chain_acceptance":
        from specdec.train.evaluate import chain_acceptance

        return chain_acceptance
    raise AttributeError(name)
