"""The files a training run writes, in one place: the trainer writes them, :mod:`specdec.train.card` reads them.

Layout of a run folder (``TrainConfig.out``)::

    train_config.json        the TrainConfig (nested sections) with the run-folder "format"
    init_head_training.json  what ``init_head`` was trained on when the run started: its ``training.json``, or the
                             facts of the unshipped run it is the head of (the lineage the run's card records, even if
                             that folder is shipped over or deleted before this run ships)
    features/{train,heldout}/  cached target features (specdec.train.features; ``data.features_dir`` moves them)
    checkpoints/step_*.pt    resumable state (specdec.train.state; the newest ``keep_checkpoints`` are kept)
    log.jsonl                one line per optimizer step: step, epoch, lr, loss, wall_s (training time so far,
                             resumes included), tokens (scored draft slots) and the recipe's other metrics
    head/                    the trained head in the official format (specdec.checkpoints.save_eagle_head)
    eval.json                held-out evaluation after the last step (specdec.train.evaluate)
    curve.jsonl              the same evaluation after each of ``eval_steps`` (τ against training tokens)

A shipped head (:func:`specdec.train.card.ship_head`) is ``head/`` plus ``training.json`` (:data:`TRAINING_FACTS`,
the facts of the run) and its model card ``README.md``.

Files of an earlier run-folder format (before :data:`RUN_FORMAT`) are refused with :class:`RunFolderError`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from specdec.errors import SpecdecError
from specdec.train.config import TrainConfig

__all__ = [
    "CHECKPOINTS",
    "CURVE",
    "EVAL",
    "FEATURES",
    "HEAD",
    "LOG",
    "PARENT_FACTS",
    "RUN_FORMAT",
    "TRAINING_FACTS",
    "TRAIN_CONFIG",
    "RunFolderError",
    "append_curve",
    "checkpoint_path",
    "checkpoints",
    "curve_points",
    "features_dir",
    "read_config",
    "read_eval",
    "read_log",
    "read_parent_facts",
    "start_log",
    "trained_tokens",
    "write_config",
    "write_eval",
    "write_parent_facts",
]

RUN_FORMAT = 2  # 1: the flat TrainConfig of specdec before its sections (no "format" key)
TRAIN_CONFIG = "train_config.json"
PARENT_FACTS = "init_head_training.json"
FEATURES = "features"
CHECKPOINTS = "checkpoints"
LOG = "log.jsonl"
HEAD = "head"
EVAL = "eval.json"
CURVE = "curve.jsonl"
TRAINING_FACTS = "training.json"


class RunFolderError(SpecdecError, ValueError):
    """A run-folder file of another format (e.g. written by an earlier specdec), or one that is missing."""


# ------------------------------------------------------------------------------------------------ config


def write_config(out: str | Path, config: TrainConfig) -> None:
    """``train_config.json``: the config with the run-folder format."""
    text = json.dumps({"format": RUN_FORMAT, **config.model_dump(mode="json")}, indent=1)
    (Path(out) / TRAIN_CONFIG).write_text(text + "\n")


def read_config(out: str | Path) -> TrainConfig:
    """The :class:`TrainConfig` a run was started with.

    Raises:
        RunFolderError: no ``train_config.json``, or one of another run-folder format (named in the message).
    """
    path = Path(out) / TRAIN_CONFIG
    if not path.is_file():
        raise RunFolderError(f"{path} is missing: {out} is not a training run folder")
    raw = json.loads(path.read_text())
    found = raw.pop("format", None)
    if found != RUN_FORMAT:
        raise RunFolderError(
            f"{path} has run-folder format {found or 1} (a flat TrainConfig from an earlier specdec); this version "
            f"reads format {RUN_FORMAT} only: train the run again"
        )
    try:
        return TrainConfig.model_validate(raw)
    except ValidationError as err:
        raise RunFolderError(f"{path} is not a valid TrainConfig: {err}") from err


def features_dir(out: str | Path, config: TrainConfig) -> Path:
    """The run's feature cache: ``data.features_dir`` or ``OUT/features``."""
    return Path(config.data.features_dir) if config.data.features_dir else Path(out) / FEATURES


# ------------------------------------------------------------------------------------------------ lineage


def write_parent_facts(out: str | Path, facts: dict[str, Any]) -> None:
    """``init_head_training.json``: what the run's ``init_head`` was trained on when the run started."""
    (Path(out) / PARENT_FACTS).write_text(json.dumps(facts, indent=1) + "\n")


def read_parent_facts(out: str | Path) -> dict[str, Any] | None:
    """The facts :func:`write_parent_facts` kept, or None when the run kept none (no ``init_head``, or a parent
    whose facts were unreadable when the run started)."""
    path = Path(out) / PARENT_FACTS
    return json.loads(path.read_text()) if path.is_file() else None


# ------------------------------------------------------------------------------------------------ checkpoints


def checkpoint_path(out: str | Path, step: int) -> Path:
    return Path(out) / CHECKPOINTS / f"step_{step:08d}.pt"


def checkpoints(out: str | Path) -> list[Path]:
    """The run's checkpoints, oldest first."""
    return sorted((Path(out) / CHECKPOINTS).glob("step_*.pt"), key=lambda p: int(p.stem.split("_")[1]))


# ------------------------------------------------------------------------------------------------ log and evaluations


def start_log(out: str | Path, step: int) -> float:
    """Keep the ``log.jsonl`` records up to ``step`` (a resumed run drops the steps after its checkpoint); returns
    the training time they had taken (``wall_s`` of the last one kept, 0 when none)."""
    path = Path(out) / LOG
    kept = []
    if step and path.is_file():
        kept = [line for line in path.read_text().splitlines() if line and json.loads(line)["step"] <= step]
    path.write_text("".join(line + "\n" for line in kept))
    return float(json.loads(kept[-1])["wall_s"]) if kept else 0.0


def read_log(out: str | Path) -> list[dict[str, Any]]:
    """The ``log.jsonl`` records of a run folder (none when there is no log yet)."""
    path = Path(out) / LOG
    return [json.loads(line) for line in path.read_text().splitlines() if line] if path.is_file() else []


def trained_tokens(records: list[dict[str, Any]]) -> int:
    """Scored draft slots over ``log.jsonl`` records (sum of the per-step ``tokens``; epochs count again)."""
    return int(sum(r["tokens"] for r in records))


def append_curve(out: str | Path, point: dict[str, Any], fresh: bool = False) -> None:
    """Add a mid-run evaluation to ``curve.jsonl`` (``fresh``: start the file over)."""
    with open(Path(out) / CURVE, "w" if fresh else "a") as f:
        f.write(json.dumps(point) + "\n")


def write_eval(out: str | Path, report: dict[str, Any]) -> None:
    (Path(out) / EVAL).write_text(json.dumps(report, indent=1))


def read_eval(out: str | Path) -> dict[str, Any] | None:
    """The final evaluation (``eval.json``), or None before the run has finished."""
    path = Path(out) / EVAL
    return json.loads(path.read_text()) if path.is_file() else None


def curve_points(out: str | Path) -> list[dict[str, Any]]:
    """The run's mid-run evaluations (``curve.jsonl``) followed by its final one (``eval.json``), when present."""
    curve = Path(out) / CURVE
    points = [json.loads(line) for line in curve.read_text().splitlines() if line] if curve.is_file() else []
    final = read_eval(out)
    return points + ([final] if final is not None else [])
