"""The ``specdec`` options that name the target model and the EAGLE head, and their checks: a model that loads,
a head of the architecture the chosen methods take, trained for that model (:class:`~specdec.errors.UsageError`
otherwise: one line with the fix)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specdec.errors import UsageError

__all__ = ["DTYPE_NAMES", "add_model_options", "check_head", "check_head_fits", "load_target_model"]

DTYPE_NAMES = ("float32", "bfloat16", "float16")  # specdec.models.DTYPES, named here without importing transformers
MODEL_FIX = "pass --model a local Hugging Face model folder (config.json, weights, tokenizer files) or a .gguf file"


def add_model_options(parser: argparse.ArgumentParser, head: bool = True, device: bool = True) -> None:
    parser.add_argument(
        "--model",
        default=None,
        help="target: a local Hugging Face model folder or a .gguf file (default: SmolLM2-135M-Instruct)",
    )
    if device:
        parser.add_argument("--device", default="cpu", help="device of the target (default: cpu)")
        parser.add_argument(
            "--dtype", choices=DTYPE_NAMES, default="float32", help="float32 (default), bfloat16 or float16"
        )
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
    import torch

    from specdec.models import MissingAssetError, load_model

    device_name = getattr(args, "device", "cpu")
    try:
        device = torch.device(device_name)
    except RuntimeError:
        raise UsageError(f"--device {device_name!r} is not a device; pass --device cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {device_name}: this machine has no CUDA device torch can use; pass --device cpu")
    dtype = getattr(args, "dtype", "float32")
    if args.model in (None, "smollm2"):
        return load_model(args.model, device=device, dtype=dtype)  # a missing package: MissingAssetError, one line
    path = Path(args.model).expanduser()
    if not path.exists():
        raise UsageError(f"--model {args.model} does not exist; {MODEL_FIX}")
    if path.is_file() and path.suffix != ".gguf":
        raise UsageError(f"--model {args.model} is a file but not a .gguf; {MODEL_FIX}")
    try:
        return load_model(args.model, device=device, dtype=dtype)
    except (MissingAssetError, OSError, ValueError) as e:  # not a model: no config, unreadable or foreign files
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UsageError(f"--model {args.model} is not a model specdec can load ({reason}); {MODEL_FIX}") from None


def check_head(args: argparse.Namespace, methods: Sequence[str], method_flag: str = "--method") -> Any:
    """The ``--head`` that the EAGLE methods among ``methods`` draft with, loaded (without its target) and checked
    against them: a readable head, of the architecture each of them takes. None without ``--head`` (the shipped
    heads; refused with ``--model``, which they were not trained for). ``method_flag`` names the option that chose
    ``methods``."""
    from specdec.methods import METHODS

    kinds = {name: m.head_kind for name, m in METHODS.items() if m.head_kind is not None}
    eagle = [m for m in methods if m in kinds]
    if not eagle:
        return None
    if args.head is None:
        if args.model not in (None, "smollm2"):
            raise UsageError(
                f"no head is shipped for --model {args.model} (the shipped heads are for SmolLM2-135M-Instruct); "
                f"{', '.join(eagle)} need an EAGLE head trained for this model: pass --head DIR, or choose "
                f"{method_flag} ngram or small-lm, which need none"
            )
        return None
    from specdec.checkpoints import CheckpointError, load_eagle_head
    from specdec.eagle.heads import Eagle3Head

    try:
        head = load_eagle_head(args.head)
    except CheckpointError as e:
        raise UsageError(
            f"--head {args.head} is not an EAGLE head ({e}); pass --head a head folder (config.json and "
            "model.safetensors, e.g. a training run's head/)"
        ) from None
    arch = _architecture("eagle3" if isinstance(head, Eagle3Head) else "eagle1")
    wrong = [m for m in eagle if _architecture(kinds[m]) != arch]
    if wrong:
        fits = [m for m, kind in kinds.items() if _architecture(kind) == arch]
        other = _architecture(kinds[wrong[0]])
        raise UsageError(
            f"--head {args.head} is an {arch} head and {' and '.join(wrong)} {_verb(wrong, 'needs')} an {other} "
            f"head; use {method_flag} {' or '.join(fits)} with this head, or pass --head an {other} head"
        )
    return head


def _verb(subjects: Sequence[str], singular: str) -> str:
    """``singular`` ("needs") for one subject, its plural ("need") for several."""
    return singular if len(subjects) == 1 else singular.removesuffix("s")


def _architecture(kind: str) -> str:
    """``EAGLE-1`` or ``EAGLE-3``: the head architecture of a shipped head kind (HASS trains an EAGLE-1 head)."""
    return "EAGLE-3" if kind == "eagle3" else "EAGLE-1"


def check_head_fits(args: argparse.Namespace, head: Any, model: Any) -> None:
    """Refuse a ``--head`` (from :func:`check_head`) trained for another model than ``model``: another vocabulary
    or hidden size."""
    if head is None:
        return
    from specdec.eagle.checks import check_head_target

    try:
        check_head_target(head, model)
    except ValueError as e:  # VocabMismatchError included
        target = args.model or "SmolLM2-135M-Instruct"
        raise UsageError(
            f"--head {args.head} was trained for another model ({e}); pass --head a head trained for {target}"
        ) from None
