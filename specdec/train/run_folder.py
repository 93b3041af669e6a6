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

Files of an earlier run-folder format (before :data:`RUN_FORMAT`), and damaged ones (a truncated ``log.jsonl``, a
stray file under ``checkpoints/``), are refused with :class:`RunFolderError` naming the file.

**Resuming or starting over** (:func:`prepare_run`): a run with ``run.resume`` and a checkpoint in ``out`` continues
that run, and only with the settings it was started with (:func:`resume_changes` names the ones that differ; those
in :data:`RESUMABLE` may change); any other run starts over and first removes what the earlier run left behind
(:data:`RUN_FILES`), so that nothing of it is resumed, logged or shipped with the new run. The feature cache stays:
it is checked against the target, data and spec before each use (:mod:`specdec.train.features`).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from specdec.errors import SpecdecError
from specdec.train.config import RunConfig, TrainConfig

__all__ = [
    "CHECKPOINTS",
    "CURVE",
    "EVAL",
    "FEATURES",
    "HEAD",
    "LOG",
    "PARENT_FACTS",
    "RESUMABLE",
    "RUN_FILES",
    "RUN_FORMAT",
    "TRAINING_FACTS",
    "TRAIN_CONFIG",
    "RunFolderError",
    "append_curve",
    "checkpoint_path",
    "checkpoints",
    "curve_points",
    "features_dir",
    "prepare_run",
    "read_config",
    "read_eval",
    "read_log",
    "read_parent_facts",
    "resume_changes",
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

#: What a run writes besides its config and feature cache: removed when a run starts over in the same folder.
RUN_FILES = (CHECKPOINTS, LOG, CURVE, EVAL, HEAD, PARENT_FACTS)

#: The options a resumed run may change (``section.field``): where it stops (``max_steps``: the schedule spans
#: every epoch whatever it says, so a run stopped early continues as if never stopped; ``epochs`` changes the
#: schedule and may not), how often it checkpoints, logs and evaluates, and where its feature cache lives. Every
#: other option decides what is trained, so it must stay as the run was started.
RESUMABLE = frozenset(
    {
        "out",
        "optim.max_steps",
        "data.features_dir",
        "data.extract_batch_size",
        "eval.eval_steps",
        *(f"run.{leaf}" for leaf in RunConfig.model_fields),
    }
)

_CHECKPOINT_NAME = re.compile(r"step_(\d+)\.pt")


class RunFolderError(SpecdecError, ValueError):
    """A run-folder file of another format (e.g. written by an earlier specdec), one that is missing or damaged, or
    a resume with other settings than the run's."""


_START_OVER = "train with --no-resume (resume=False) to start over"


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
    raw = _json(path, path.read_text())
    if not isinstance(raw, dict):
        raise RunFolderError(f"{path} is not a TrainConfig (a JSON object); {_START_OVER}")
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


def _json(path: Path, text: str, line: int | None = None) -> Any:
    """``text`` (of ``path``, line ``line``) parsed; a damaged file raises :class:`RunFolderError` naming it."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        where = f"{path} line {line}" if line is not None else str(path)
        raise RunFolderError(f"{where} is damaged (truncated or not JSON: {err}); {_START_OVER}") from err


# ------------------------------------------------------------------------------------------------ resume or start over


def prepare_run(out: str | Path, config: TrainConfig) -> bool:
    """Make ``out`` ready for ``config``'s run; returns whether the run resumes (``run.resume`` and a checkpoint).

    A resumed run must have the settings its ``train_config.json`` records (but those in :data:`RESUMABLE`); any
    other run starts over: the earlier run's :data:`RUN_FILES` are removed (its config is rewritten by the caller).

    Raises:
        RunFolderError: a resume with other settings (named in the message), a run folder whose config is missing
            or damaged, or a fresh start whose ``init_head`` lies in a file it would remove.
    """
    out = Path(out)
    if config.run.resume and checkpoints(out):
        changed = resume_changes(_saved_config(out), config)
        if changed:
            raise RunFolderError(
                f"{out} holds a run started with other settings ({TRAIN_CONFIG} -> this run: {', '.join(changed)}); "
                "train with the same settings to resume it, or with --no-resume (resume=False) to start over"
            )
        return True
    _remove_run_files(out, config.head.init_head)
    return False


def resume_changes(saved: TrainConfig, config: TrainConfig) -> list[str]:
    """The options (``section.field``, or a top-level name) that differ between a run's saved config and the one
    resuming it, except those in :data:`RESUMABLE`; each as ``name saved -> new``."""
    old, new = _flat(saved.model_dump(mode="json")), _flat(config.model_dump(mode="json"))
    return [f"{k} {old.get(k)!r} -> {new.get(k)!r}" for k in new if k not in RESUMABLE and old.get(k) != new[k]]


def _flat(dumped: dict[str, Any]) -> dict[str, Any]:
    """A dumped config by ``section.field`` (top-level names as they are)."""
    flat: dict[str, Any] = {}
    for key, value in dumped.items():
        if isinstance(value, dict):
            flat.update({f"{key}.{leaf}": v for leaf, v in value.items()})
        else:
            flat[key] = value
    return flat


def _saved_config(out: Path) -> TrainConfig:
    if not (out / TRAIN_CONFIG).is_file():
        raise RunFolderError(f"{out} holds checkpoints but no {TRAIN_CONFIG} to resume with; {_START_OVER}")
    return read_config(out)


def _remove_run_files(out: Path, init_head: Path | None) -> None:
    """Remove what an earlier run in ``out`` left behind (:data:`RUN_FILES`), refusing to remove ``init_head``."""
    paths = [out / name for name in RUN_FILES if (out / name).exists()]
    if init_head is not None:
        parent = Path(init_head).resolve()
        for path in paths:
            if parent == path.resolve() or path.resolve() in parent.parents:
                raise RunFolderError(
                    f"init_head {init_head} is inside {path}, which a run starting over in {out} removes; copy the "
                    "head elsewhere first, or train into another --out"
                )
    for path in paths:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()


# ------------------------------------------------------------------------------------------------ lineage


def write_parent_facts(out: str | Path, facts: dict[str, Any]) -> None:
    """``init_head_training.json``: what the run's ``init_head`` was trained on when the run started."""
    (Path(out) / PARENT_FACTS).write_text(json.dumps(facts, indent=1) + "\n")


def read_parent_facts(out: str | Path) -> dict[str, Any] | None:
    """The facts :func:`write_parent_facts` kept, or None when the run kept none (no ``init_head``, or a parent
    whose facts were unreadable when the run started)."""
    path = Path(out) / PARENT_FACTS
    return _json(path, path.read_text()) if path.is_file() else None


# ------------------------------------------------------------------------------------------------ checkpoints


def checkpoint_path(out: str | Path, step: int) -> Path:
    return Path(out) / CHECKPOINTS / f"step_{step:08d}.pt"


def checkpoints(out: str | Path) -> list[Path]:
    """The run's checkpoints, oldest first.

    Raises:
        RunFolderError: a ``step_*.pt`` whose name is not ``step_<number>.pt`` (not written by a run).
    """
    found = sorted((Path(out) / CHECKPOINTS).glob("step_*.pt"))
    stray = [p for p in found if not _CHECKPOINT_NAME.fullmatch(p.name)]
    if stray:
        raise RunFolderError(f"{stray[0]} is not a checkpoint a run writes (step_<number>.pt); {_START_OVER}")
    return sorted(found, key=lambda p: int(p.stem.split("_")[1]))


# ------------------------------------------------------------------------------------------------ log and evaluations


def start_log(out: str | Path, step: int) -> float:
    """Keep the ``log.jsonl`` records up to ``step`` (a resumed run drops the steps after its checkpoint); returns
    the training time they had taken (``wall_s`` of the last one kept, 0 when none)."""
    path = Path(out) / LOG
    kept = [record for record in _records(path) if record["step"] <= step] if step else []
    path.write_text("".join(json.dumps(record) + "\n" for record in kept))
    return float(kept[-1]["wall_s"]) if kept else 0.0


def read_log(out: str | Path) -> list[dict[str, Any]]:
    """The ``log.jsonl`` records of a run folder (none when there is no log yet).

    Raises:
        RunFolderError: a damaged line (e.g. the last one cut short), named in the message.
    """
    return _records(Path(out) / LOG)


def _records(path: Path) -> list[dict[str, Any]]:
    """The records of a JSON-lines file of the run folder (none when it is missing)."""
    if not path.is_file():
        return []
    records = [_json(path, line, n) for n, line in enumerate(path.read_text().splitlines(), 1) if line]
    for n, record in enumerate(records, 1):
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            raise RunFolderError(f"{path} record {n} has no step; {_START_OVER}")
    return records


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
    return _json(path, path.read_text()) if path.is_file() else None


def curve_points(out: str | Path) -> list[dict[str, Any]]:
    """The run's mid-run evaluations (``curve.jsonl``) followed by its final one (``eval.json``), when present."""
    points = _records(Path(out) / CURVE)
    final = read_eval(out)
    return points + ([final] if final is not None else [])
