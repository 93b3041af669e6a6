"""``specdec train {eagle1,hass,eagle3} --out DIR …``.

Wire into the main command with :func:`add_train_parser` (adds the ``train`` sub-command) and :func:`run_train`.
Standalone: ``python -m specdec.train.cli eagle1 --out runs/e1 --max-conversations 200 --max-len 512``; on several
GPUs: ``accelerate launch -m specdec.train.cli eagle3 --out runs/e3 …``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["add_train_parser", "run_train", "main"]

_HELP = {
    "out": "output folder (features, checkpoints, log.jsonl, head/, eval.json)",
    "target": "'smollm2' (default), a local HF model folder or a .gguf file",
    "max_conversations": "training conversations taken from ShareGPT (default 1000)",
    "max_len": "truncate conversations to this many tokens (default 1024)",
    "epochs": "epochs (default 1)",
    "lr": "peak learning rate (default 3e-5, the reference's)",
    "seed": "seed of the head init, data order and noise (default 0)",
}


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("recipe", choices=["eagle1", "hass", "eagle3"], help="training recipe")
    p.add_argument("--out", type=Path, required=True, help=_HELP["out"])
    p.add_argument("--model", "--target", dest="target", default="smollm2", help=_HELP["target"])
    p.add_argument("--max-conversations", type=int, default=1000, help=_HELP["max_conversations"])
    p.add_argument(
        "--data", type=Path, default=None, help="self-distilled data folder (specdec data regenerate); default ShareGPT"
    )
    p.add_argument(
        "--init-head",
        type=Path,
        default=None,
        help="continue training this head folder (e.g. a shipped head) on the run's data instead of a fresh init",
    )
    p.add_argument(
        "--skip-sequences",
        type=int,
        default=0,
        help="leave out the data's first N training sequences (those the --init-head lineage already trained on)",
    )
    p.add_argument("--max-len", type=int, default=1024, help=_HELP["max_len"])
    p.add_argument("--max-heldout", type=int, default=50, help="held-out conversations (default 50)")
    p.add_argument("--epochs", type=int, default=1, help=_HELP["epochs"])
    p.add_argument("--max-steps", type=int, default=None, help="stop after this many optimizer steps")
    p.add_argument("--batch-size", type=int, default=1, help="sequences per step and process (default 1)")
    p.add_argument("--lr", type=float, default=3e-5, help=_HELP["lr"])
    p.add_argument("--warmup-steps", type=int, default=None, help="default: min(2000, 5%% of the steps)")
    p.add_argument("--seed", type=int, default=0, help=_HELP["seed"])
    p.add_argument("--draft-vocab-size", type=int, default=None, help="EAGLE-3 draft vocab (default min(V, 32000))")
    p.add_argument("--features-dir", type=Path, default=None, help="feature cache (default OUT/features)")
    p.add_argument(
        "--captured-features",
        type=Path,
        default=None,
        help="features captured while generating the data (specdec data regenerate --capture-features): sequences "
        "found there skip the target forward of the extraction",
    )
    p.add_argument("--feature-dtype", choices=["bfloat16", "float16", "float32"], default="bfloat16")
    p.add_argument("--mixed-precision", choices=["no", "bf16", "fp16"], default="no")
    p.add_argument("--save-every", type=int, default=200, help="checkpoint every N steps (default 200)")
    p.add_argument("--no-resume", action="store_true", help="ignore existing checkpoints in OUT")
    p.add_argument("--eval-depth", type=int, default=5, help="greedy-chain depth of the held-out evaluation")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--extract-only", action="store_true", help="cache the target features and stop")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other TrainConfig field, VALUE parsed as JSON (e.g. --set passes=3 --set noise=0.05)",
    )


def add_train_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``train`` sub-command to an ``argparse`` sub-parsers object; returns the new parser."""
    p = subparsers.add_parser("train", help="train an EAGLE-1 / HASS / EAGLE-3 head", description=__doc__)
    _add_arguments(p)
    p.set_defaults(func=run_train)
    return p


def _config_from_args(args: argparse.Namespace) -> Any:
    from specdec.train.trainer import TrainConfig

    fields: dict[str, Any] = {
        "recipe": args.recipe,
        "out": args.out,
        "target": args.target,
        "max_conversations": args.max_conversations,
        "data_dir": args.data,
        "init_head": args.init_head,
        "skip_sequences": args.skip_sequences,
        "max_len": args.max_len,
        "max_heldout": args.max_heldout,
        "epochs": args.epochs,
        "max_steps": args.max_steps,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "warmup_steps": args.warmup_steps,
        "seed": args.seed,
        "draft_vocab_size": args.draft_vocab_size,
        "features_dir": args.features_dir,
        "captured_features": args.captured_features,
        "feature_dtype": args.feature_dtype,
        "mixed_precision": args.mixed_precision,
        "save_every": args.save_every,
        "resume": not args.no_resume,
        "eval_depth": args.eval_depth,
        "progress": not args.no_progress,
        "extract_only": args.extract_only,
    }
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set expects KEY=VALUE, got {item!r}")
        try:
            fields[key.strip().replace("-", "_")] = json.loads(value)
        except json.JSONDecodeError:
            fields[key.strip().replace("-", "_")] = value
    return TrainConfig.model_validate(fields)


def run_train(args: argparse.Namespace) -> int:
    """Run the ``train`` sub-command; prints the head folder and the held-out evaluation. Returns 0."""
    from specdec.train.trainer import train

    config = _config_from_args(args)
    result = train(config)
    if config.extract_only:
        print(f"features: {result}")
        return 0
    eval_path = Path(config.out) / "eval.json"
    print(f"head: {result}")
    if eval_path.is_file():
        print(eval_path.read_text())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m specdec.train.cli RECIPE --out DIR …``"""
    parser = argparse.ArgumentParser(prog="specdec train", description=__doc__)
    _add_arguments(parser)
    return run_train(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
