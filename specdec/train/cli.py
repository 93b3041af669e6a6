"""``specdec train {eagle1,hass,eagle3} --out DIR …``.

Wire into the main command with :func:`add_train_parser` (adds the ``train`` sub-command) and :func:`run_train`.
Standalone: ``python -m specdec.train.cli eagle1 --out runs/e1 --max-conversations 200 --max-len 512``; on several
GPUs: ``accelerate launch -m specdec.train.cli eagle3 --out runs/e3 …``.

Each flag sets one :class:`~specdec.train.config.TrainConfig` option; a flag left out is not passed on, so the
config's own default applies (the help shows it). ``--set KEY=VALUE`` sets any option by its name (``--set steps=3``)
or as ``section.field`` (``--set ttt.steps=3``), VALUE parsed as JSON; an unknown KEY is refused with the valid ones.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, get_args

from pydantic import ValidationError

from specdec.errors import SpecdecError, error_exit
from specdec.train.config import (
    RECIPE_NAMES,
    DataConfig,
    OptimConfig,
    TrainConfig,
    config_error,
    default_of,
    nest_options,
)

__all__ = ["add_train_parser", "run_train", "main"]

_DTYPES = get_args(DataConfig.model_fields["feature_dtype"].annotation)
_PRECISIONS = get_args(OptimConfig.model_fields["mixed_precision"].annotation)

#: ``(flag, option, help, argparse keywords)`` of the flags that set one option each.
_FLAGS: tuple[tuple[str, str, str, dict[str, Any]], ...] = (
    ("--max-conversations", "max_conversations", "training sequences taken", {"type": int}),
    ("--data", "data_dir", "self-distilled data folder (specdec data regenerate); None: ShareGPT", {"type": Path}),
    ("--init-head", "init_head", "continue training this head folder (e.g. a shipped head)", {"type": Path}),
    ("--skip-sequences", "skip_sequences", "leave out the data's first N (the lineage's) sequences", {"type": int}),
    ("--max-len", "max_len", "truncate sequences to this many tokens", {"type": int}),
    ("--max-heldout", "max_heldout", "held-out conversations", {"type": int}),
    ("--epochs", "epochs", "epochs", {"type": int}),
    ("--max-steps", "max_steps", "stop after this many optimizer steps", {"type": int}),
    ("--batch-size", "batch_size", "sequences per step and process", {"type": int}),
    ("--lr", "lr", "peak learning rate", {"type": float}),
    ("--warmup-steps", "warmup_steps", "warmup steps; None: min(2000, 5%% of the steps)", {"type": int}),
    ("--seed", "seed", "seed of the head init, data order and noise", {"type": int}),
    ("--draft-vocab-size", "draft_vocab_size", "EAGLE-3 draft vocabulary; None: min(V, 32000)", {"type": int}),
    ("--features-dir", "features_dir", "feature cache; None: OUT/features", {"type": Path}),
    (
        "--captured-features",
        "captured_features",
        "features captured while generating the data (specdec data regenerate --capture-features): sequences "
        "found there skip the target forward of the extraction",
        {"type": Path},
    ),
    (
        "--feature-dtype",
        "feature_dtype",
        "storage dtype of the features",
        {"choices": _DTYPES},
    ),
    ("--mixed-precision", "mixed_precision", "autocast of the head's steps", {"choices": _PRECISIONS}),
    ("--save-every", "save_every", "checkpoint every N steps", {"type": int}),
    ("--eval-depth", "eval_depth", "greedy-chain depth of the held-out evaluation", {"type": int}),
)

#: ``(flag, option, value it sets, help)`` of the switches.
_SWITCHES: tuple[tuple[str, str, bool, str], ...] = (
    ("--no-resume", "resume", False, "ignore existing checkpoints in OUT"),
    ("--no-progress", "progress", False, "no progress bars"),
    ("--extract-only", "extract_only", True, "cache the target features and stop"),
)


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("recipe", choices=RECIPE_NAMES, help="training recipe")
    p.add_argument("--out", type=Path, required=True, help="run folder (features, checkpoints, log.jsonl, head/, …)")
    p.add_argument(
        "--model",
        "--target",
        dest="target",
        default=argparse.SUPPRESS,
        help="'smollm2' (default), a local HF model folder or a .gguf file",
    )
    for flag, leaf, text, kwargs in _FLAGS:
        default = default_of(leaf)
        text = text if default is None else f"{text} (default {default})"
        p.add_argument(flag, dest=leaf, default=argparse.SUPPRESS, help=text, **kwargs)
    for flag, leaf, value, text in _SWITCHES:
        action = "store_true" if value else "store_false"
        p.add_argument(flag, dest=leaf, action=action, default=argparse.SUPPRESS, help=text)
    p.add_argument(
        "--set",
        dest="set_options",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any TrainConfig option by its name or as section.field, VALUE parsed as JSON "
        "(e.g. --set steps=3 --set noise=0.05 --set 'eval_steps=[0,500]')",
    )


def add_train_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``train`` sub-command to an ``argparse`` sub-parsers object; returns the new parser."""
    p = subparsers.add_parser("train", help="train an EAGLE-1 / HASS / EAGLE-3 head", description=__doc__)
    _add_arguments(p)
    p.set_defaults(func=run_train)
    return p


def _config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The config of the parsed arguments: the flags given, then each ``--set`` in order.

    Raises:
        UnknownOptionError: a ``--set`` KEY that no section has (the message lists the valid keys).
        ConflictingOptionError: one option given twice with different values (``--lr`` and ``--set optim.lr``).
        InvalidOptionError: a value out of range or of the wrong type (each named).
        SystemExit: a ``--set`` item without ``=``.
    """
    options = ("recipe", "out", "target", *(leaf for _, leaf, _, _ in _FLAGS), *(leaf for _, leaf, _, _ in _SWITCHES))
    given = {k: getattr(args, k) for k in options if hasattr(args, k)}
    for item in args.set_options:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set expects KEY=VALUE, got {item!r}")
        try:
            given[key.strip().replace("-", "_")] = json.loads(value)
        except json.JSONDecodeError:
            given[key.strip().replace("-", "_")] = value
    try:
        return TrainConfig.model_validate(nest_options(given))
    except ValidationError as err:
        raise config_error(err) from err


def run_train(args: argparse.Namespace) -> int:
    """Run the ``train`` sub-command; prints the head folder and the held-out evaluation. Returns 0."""
    from specdec.train.run_folder import read_eval
    from specdec.train.trainer import train

    config = _config_from_args(args)
    result = train(config)
    if config.run.extract_only:
        print(f"features: {result}")
        return 0
    print(f"head: {result}")
    evaluation = read_eval(config.out)
    if evaluation is not None:
        print(json.dumps(evaluation, indent=1))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m specdec.train.cli RECIPE --out DIR …``"""
    parser = argparse.ArgumentParser(prog="specdec train", description=__doc__)
    _add_arguments(parser)
    try:
        return run_train(parser.parse_args(argv))
    except SpecdecError as e:  # as `specdec train` prints it: one line, not a traceback
        return error_exit(e, "train")


if __name__ == "__main__":
    raise SystemExit(main())
