"""The options several ``specdec`` subcommands share, and how they become library objects.

Each ``add_*`` function adds a group of options to a subcommand's parser; each other function turns parsed options
into what the library takes (a target's backend choices, :class:`~specdec.methods.MethodOptions`, a model), raising
:class:`UsageError` (one ``specdec: error: ...`` line, exit code 2) for a user mistake.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from specdec.errors import SpecdecError

__all__ = [
    "UsageError",
    "add_backend_options",
    "add_model_options",
    "add_sampled_tree_option",
    "check_head",
    "load_target_model",
    "method_options",
    "target_backend",
]


class UsageError(SpecdecError):
    """A user error reported as one line with exit code 2."""


def method_options(args: argparse.Namespace) -> Any:
    """The :class:`~specdec.methods.MethodOptions` of ``--draft-weights``, ``--head`` and ``--sampled-tree``."""
    from specdec.methods import MethodOptions

    extra = {}
    if args.sampled_tree is not None:
        extra["sampled_tree"] = None if args.sampled_tree == "off" else args.sampled_tree
    try:
        return MethodOptions(draft_weights=args.draft_weights, head_dir=args.head, **extra)
    except ValueError as e:
        raise UsageError(f"--sampled-tree: {e}") from None


def add_sampled_tree_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sampled-tree",
        default=None,
        metavar="SHAPE",
        help="at temperature > 0 the EAGLE and small-lm methods draw a static tree with sampled children, of this "
        "shape (a name in specdec.methods.SAMPLED_SHAPES; default: MethodOptions.sampled_tree); off keeps the "
        "dynamic top-k tree",
    )


def add_backend_options(parser: argparse.ArgumentParser, drafts: bool = True, static: bool = True) -> None:
    """The two backend choices (:mod:`specdec.backends`): how the weights run, and whether shapes are static."""
    parser.add_argument(
        "--weights",
        choices=("auto", "stock", "packed"),
        default="auto",
        help="how the target's weights run: auto (default: oneDNN-packed linears where they pay on this CPU, "
        "float32), packed (every linear), stock (as loaded)",
    )
    if drafts:
        parser.add_argument(
            "--draft-weights",
            choices=("auto", "stock", "packed", "int8"),
            default="auto",
            help="how EAGLE heads' weights run: auto (default: int8 on a CPU; lossless, the verifier corrects "
            "against the q the draft used), int8, packed, stock",
        )
    if static:
        parser.add_argument(
            "--static-shapes",
            choices=("auto", "on", "off"),
            default="auto",
            help="run forwards at fixed, bucketed shapes under torch.compile (inductor on CPU, CUDA graphs on GPU); "
            "auto (default): on for CUDA, off on a CPU",
        )


def target_backend(args: argparse.Namespace) -> dict[str, Any]:
    """``weights`` / ``static_shapes`` keyword arguments of :class:`~specdec.target.HFTarget` from the options."""
    static = {"auto": "auto", "on": True, "off": False}[getattr(args, "static_shapes", "auto")]
    return {"weights": args.weights, "static_shapes": static}


def add_model_options(parser: argparse.ArgumentParser, head: bool = True) -> None:
    parser.add_argument(
        "--model",
        default=None,
        help="target: a local Hugging Face model folder or a .gguf file (default: SmolLM2-135M-Instruct)",
    )
    parser.add_argument("--device", default="cpu", help="device of the target (default: cpu)")
    parser.add_argument("--dtype", default="float32", help="float32 (default), bfloat16 or float16")
    if head:
        parser.add_argument(
            "--head",
            type=Path,
            default=None,
            help="EAGLE head folder for the eagle methods (default: the head shipped for SmolLM2; required with "
            "--model)",
        )


def load_target_model(args: argparse.Namespace) -> tuple[Any, Any]:
    """The model and tokenizer that ``--model/--device/--dtype`` name; user errors become :class:`UsageError`."""
    from specdec.models import load_model

    try:
        return load_model(args.model, device=args.device, dtype=args.dtype)
    except ValueError as e:
        raise UsageError(str(e)) from None


def check_head(args: argparse.Namespace, methods: list[str]) -> None:
    eagle = [m for m in methods if m.startswith(("eagle", "hass"))]
    if eagle and args.model is not None and args.head is None:
        raise UsageError(
            f"{', '.join(eagle)} need an EAGLE head trained for this model: pass --head DIR (the shipped heads are "
            "for SmolLM2-135M-Instruct); ngram and small-lm need none"
        )
