"""Resumable state of a training run: seeds, RNG states and the checkpoints a run resumes from.

Determinism: the data order of epoch ``e`` is a permutation seeded by ``derived_seed(seed, e)`` and the feature noise
of step ``s`` on process ``r`` comes from a generator seeded by ``derived_seed(seed, s, r)``; a checkpoint holds the
head, optimizer, scheduler, step and every global RNG state. So a run resumed from a checkpoint produces the same loss
sequence as an uninterrupted one.

A checkpoint (``checkpoints/step_*.pt``, :mod:`specdec.train.run_folder`) holds tensors and plain values only and is
read with ``torch.load(weights_only=True)``: resuming never runs code from a file. One of another run-folder format
is refused (:class:`~specdec.train.run_folder.RunFolderError`).
"""

from __future__ import annotations

import hashlib
import pickle
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from specdec.train.run_folder import RUN_FORMAT, RunFolderError, checkpoint_path, checkpoints

__all__ = [
    "derived_seed",
    "load_checkpoint",
    "resume",
    "rng_state",
    "save_checkpoint",
    "seed_all",
    "set_rng_state",
]


#: What a checkpoint holds besides its format.
_STATE = ("head", "optimizer", "scheduler", "step", "rng")


def seed_all(seed: int) -> None:
    """Seed Python's, numpy's and torch's global generators."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def derived_seed(*parts: int) -> int:
    """A 63-bit seed from ``parts`` (e.g. ``(seed, epoch)``), independent across different parts."""
    return int.from_bytes(hashlib.sha256(":".join(map(str, parts)).encode()).digest()[:8], "big") >> 1


def rng_state() -> dict[str, Any]:
    """Every global RNG's state as tensors and plain numbers, so that a weights-only load reads it back."""
    version, mt, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": {"version": int(version), "mt": torch.tensor(mt, dtype=torch.int64), "gauss": gauss},
        "numpy": {
            "kind": str(kind),
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Inverse of :func:`rng_state`."""
    py, nps = state["python"], state["numpy"]
    random.setstate((py["version"], tuple(int(x) for x in py["mt"].tolist()), py["gauss"]))
    keys = nps["keys"].numpy().astype(np.uint32)
    np.random.set_state((nps["kind"], keys, nps["pos"], nps["has_gauss"], nps["cached"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    out: str | Path,
    step: int,
    head: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    keep: int,
) -> Path:
    """Write ``checkpoints/step_{step}.pt`` (temporary file, rename) and delete all but the newest ``keep``."""
    state = {
        "format": RUN_FORMAT,
        "head": head.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "step": step,
        "rng": rng_state(),
    }
    path = checkpoint_path(out, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, path.with_suffix(".tmp"))
    path.with_suffix(".tmp").replace(path)
    for old in checkpoints(out)[:-keep]:
        old.unlink()
    return path


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """A checkpoint's state, read with ``weights_only=True``: tensors and plain values, never arbitrary objects.

    Raises:
        RunFolderError: the file is damaged (empty, truncated, not a checkpoint), holds other objects, lacks part
            of the state, or has another run-folder format (an earlier specdec's).
    """
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        refused = "Unsupported global" in str(err)  # an object a weights-only load refuses (else: not a pickle)
        raise _unusable(path, "holds objects a weights-only load refuses" if refused else "is damaged") from err
    except (RuntimeError, EOFError, OSError, ValueError) as err:  # torch's errors for a truncated or empty file
        raise _unusable(path, f"is damaged (truncated or not a checkpoint: {_gist(err)})") from err
    if not isinstance(state, dict) or state.get("format") != RUN_FORMAT:
        found = state.get("format", 1) if isinstance(state, dict) else "unknown"
        raise _unusable(path, f"has run-folder format {found}, this version resumes format {RUN_FORMAT} only")
    return state


def _gist(err: BaseException) -> str:
    """The first lines of an error's message, short (torch's run over many lines), or its type when it has none."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    text = " ".join(lines[:2]) or type(err).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def _unusable(path: str | Path, problem: str) -> RunFolderError:
    return RunFolderError(
        f"checkpoint {path} {problem}; delete {Path(path).parent} or train with --no-resume to start over"
    )


def resume(
    out: str | Path,
    head: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
) -> int:
    """Restore the newest checkpoint in ``out`` into ``head``, ``optimizer``, ``scheduler`` and the global RNGs;
    returns its step (0, with nothing restored, when there is none).

    Raises:
        RunFolderError: the checkpoint is damaged, lacks part of the state, or does not fit ``head`` (named).
    """
    found = checkpoints(out)
    if not found:
        return 0
    state = load_checkpoint(found[-1])
    missing = [key for key in _STATE if key not in state]
    if missing:
        raise _unusable(found[-1], f"lacks {', '.join(missing)}")
    try:
        head.load_state_dict(state["head"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        set_rng_state(state["rng"])
    except (RuntimeError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise _unusable(found[-1], f"does not fit this run ({_gist(err)})") from err
    return int(state["step"])
