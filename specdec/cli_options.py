"""The options several ``specdec`` subcommands share, and how they become library objects.

Each ``add_*`` function adds a group of options to a subcommand's parser; each other function turns parsed options
into what the library takes (a target's backend choices, :class:`~specdec.methods.MethodOptions`, a model, a head)
or refuses them, raising :class:`UsageError` (one ``specdec: error: <what is wrong>; <the fix>`` line, exit code 2)
for a user mistake. Numbers are checked where they are parsed (:func:`at_least`, :data:`TEMPERATURE`,
:data:`TOP_P`), so a value out of range never reaches a command.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from specdec.errors import UsageError

__all__ = [
    "SEED_HELP",
    "TEMPERATURE",
    "TOP_P",
    "MethodsHelp",
    "Parser",
    "UsageError",
    "add_backend_options",
    "add_cache_option",
    "add_corpus_option",
    "add_sampled_tree_option",
    "add_sampling_options",
    "at_least",
    "cache_size",
    "check_applicable",
    "check_max_len",
    "method_options",
    "sampling_filters",
    "target_backend",
]

#: Cache room the default ``--max-len`` keeps for one draft tree beyond the prompt and the new tokens.
TREE_ROOM = 128


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are :class:`UsageError` s (one line, exit code 2) instead of a usage block
    and ``SystemExit``. Subcommand parsers made with ``add_subparsers().add_parser`` are of this class too."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message}; see {self.prog} --help")


class MethodsHelp(argparse.HelpFormatter):
    """Lists the named methods (:data:`specdec.methods.METHODS`, with their summaries) under ``--method`` and
    ``--methods`` when help is printed: the methods (and torch) are imported only then, so parsing stays light."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = super()._get_help_string(action)
        if action.dest in ("method", "methods"):
            from specdec.methods import METHODS

            text = f"{text}. Methods: " + "; ".join(f"{name} ({m.summary})" for name, m in METHODS.items())
        return text


def _number(kind: type, ok: Callable[[Any], bool], rule: str) -> Callable[[str], Any]:
    """An argparse ``type`` that parses ``kind`` and refuses values outside ``rule``."""

    def parse(text: str) -> Any:
        value = kind(text)  # not a number: argparse says "invalid int value: 'x'" (the name below)
        if not ok(value):
            raise argparse.ArgumentTypeError(f"must be {rule}, got {text}")
        return value

    parse.__name__ = kind.__name__
    return parse


def at_least(low: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer ``>= low``."""
    return _number(int, lambda v: v >= low, f"an integer >= {low}")


#: An argparse ``type``: a finite temperature ``>= 0``.
TEMPERATURE = _number(float, lambda v: math.isfinite(v) and v >= 0, "a finite number >= 0")
#: An argparse ``type``: a top-p mass in ``(0, 1]``.
TOP_P = _number(float, lambda v: 0 < v <= 1, "a number in (0, 1]")
#: An argparse ``type``: a finite number above 0.
POSITIVE_FLOAT = _number(float, lambda v: math.isfinite(v) and v > 0, "a finite number above 0")


#: The command-line option of each :class:`~specdec.methods.MethodOptions` field the command line sets.
OPTION_FLAGS = {
    "head_dir": "--head",
    "draft_weights": "--draft-weights",
    "total_tokens": "--total-tokens",
    "sampled_tree": "--sampled-tree",
    "draft_temperature_ratio": "--draft-temperature-ratio",
    "sampled_level_gate": "--sampled-level-gate",
    "corpus": "--corpus",
}


def option_values(args: argparse.Namespace) -> dict[str, Any]:
    """The :class:`~specdec.methods.MethodOptions` fields the command line set (by field name; the rest keep
    their defaults)."""
    values: dict[str, Any] = {}
    if getattr(args, "head", None) is not None:
        values["head_dir"] = args.head
    if getattr(args, "draft_weights", None) is not None:
        values["draft_weights"] = args.draft_weights
    if getattr(args, "total_tokens", None) is not None:
        values["total_tokens"] = args.total_tokens
    if getattr(args, "sampled_tree", None) is not None:
        values["sampled_tree"] = None if args.sampled_tree == "off" else args.sampled_tree
    if getattr(args, "draft_temperature_ratio", None) is not None:
        values["draft_temperature_ratio"] = args.draft_temperature_ratio
    if getattr(args, "sampled_level_gate", False):
        values["sampled_level_gate"] = True
    if getattr(args, "corpus", None) is not None:
        values["corpus"] = args.corpus
    return values


def method_options(args: argparse.Namespace) -> Any:
    """The :class:`~specdec.methods.MethodOptions` of the options the command line set (:func:`option_values`)."""
    from pydantic import ValidationError

    from specdec.method_options import MethodOptions

    try:
        return MethodOptions(**option_values(args))
    except ValidationError as e:  # a backstop: the parser's types and check_applicable refuse these first
        error = e.errors()[0]
        flag = OPTION_FLAGS.get(str(error["loc"][0]), "") if error["loc"] else ""
        message = str(error["msg"]).removeprefix("Value error, ")
        raise UsageError(f"{flag or 'the method options'}: {message}; change the options named") from None


def _sampled_tree(value: str) -> str:
    """An argparse ``type``: a sampled tree's name, ``menu`` or ``off`` (the options' own check)."""
    from specdec.method_options import check_sampled_tree

    if value != "off":
        try:
            check_sampled_tree(value)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"{e}, or off") from None
    return value


def add_sampled_tree_option(parser: argparse.ArgumentParser) -> None:
    """The tree options: ``--total-tokens`` and the sampled tree's (``--sampled-tree``, its ratio and gate)."""
    parser.add_argument(
        "--total-tokens",
        type=at_least(2),
        default=None,
        metavar="N",
        help="a fixed size of the dynamic tree, root included (the whole tree for composite); default: sized per "
        "cycle from the target's measured forward cost",
    )
    parser.add_argument(
        "--sampled-tree",
        type=_sampled_tree,
        default=None,
        metavar="SHAPE",
        help="at temperature > 0 the EAGLE and small-lm methods draw a static tree with sampled children, of this "
        "shape (a name in specdec.method_options.SAMPLED_SHAPES; menu: chosen per cycle by measured rate; ranked: "
        "shaped per cycle from measured acceptance by draw rank and cost; default: MethodOptions.sampled_tree); off "
        "keeps the dynamic top-k tree",
    )
    parser.add_argument(
        "--draft-temperature-ratio",
        type=POSITIVE_FLOAT,
        default=None,
        metavar="R",
        help="the sampled tree's children are drawn at R x the temperature (lossless for any R: the verifier reads "
        "the q they came from; default: MethodOptions.draft_temperature_ratio)",
    )
    parser.add_argument(
        "--sampled-level-gate",
        action="store_true",
        help="the sampled tree draws each level after the root's only where this cycle's draws say it pays "
        "(MethodOptions.sampled_level_gate; the trees then depend on measured timings, so a seed fixes the "
        "distribution but not the exact sample)",
    )


def add_corpus_option(parser: argparse.ArgumentParser) -> None:
    """``--corpus``: the retrieval corpus of ``retrieval`` and ``composite`` (``MethodOptions.corpus``)."""
    parser.add_argument(
        "--corpus",
        type=Path,
        default=None,
        metavar="FILE",
        help="retrieval (retrieval, composite) also continues from this corpus where the context has no match: a "
        "file from `specdec data corpus` (e.g. the target's own greedy responses); default: the context alone",
    )


def add_sampling_options(parser: argparse.ArgumentParser) -> None:
    """``--top-p`` and ``--top-k``: the filters :class:`~specdec.sampling.SamplingParams` applies at T > 0."""
    parser.add_argument(
        "--top-p",
        type=TOP_P,
        default=None,
        help="keep the most likely tokens whose mass reaches P, in (0, 1] (default 1: off); needs a temperature > 0",
    )
    parser.add_argument(
        "--top-k",
        type=at_least(0),
        default=None,
        help="keep the K most likely tokens (default 0: off); needs a temperature > 0",
    )


def sampling_filters(args: argparse.Namespace) -> dict[str, Any]:
    """``top_p`` / ``top_k`` keyword arguments of :class:`~specdec.sampling.SamplingParams` (its defaults where the
    options are not given)."""
    from specdec.sampling import SamplingParams

    fields = SamplingParams.model_fields
    return {
        "top_p": fields["top_p"].default if args.top_p is None else args.top_p,
        "top_k": fields["top_k"].default if args.top_k is None else args.top_k,
    }


def add_cache_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-len",
        type=at_least(1),
        default=None,
        help="the target's cache in tokens: prompt + new tokens + one draft tree (default: just enough, within the "
        "model's context)",
    )


def check_max_len(args: argparse.Namespace, model: Any) -> int:
    """The model's context (``max_position_embeddings``); a ``--max-len`` beyond it is refused."""
    limit = getattr(model.config.get_text_config(), "max_position_embeddings", None) or 1 << 30
    if args.max_len is not None and args.max_len > limit:
        raise UsageError(f"--max-len {args.max_len} exceeds the model's context of {limit} positions; lower --max-len")
    return limit


def cache_size(args: argparse.Namespace, prompt_len: int, model: Any) -> int:
    """The target's cache: ``--max-len``, or room for the prompt, ``--max-new-tokens`` and one draft tree; either
    within the model's context (:func:`check_max_len`)."""
    limit = check_max_len(args, model)
    if args.max_len is not None:
        return args.max_len
    need = prompt_len + args.max_new_tokens
    if need > limit:
        raise UsageError(
            f"the prompt ({prompt_len} tokens) and --max-new-tokens {args.max_new_tokens} need {need} positions, more "
            f"than the model's context of {limit}; lower --max-new-tokens or shorten the prompt"
        )
    return min(limit, need + TREE_ROOM)


def add_backend_options(parser: argparse.ArgumentParser, drafts: bool = True, static: bool = True) -> None:
    """The two backend choices (:mod:`specdec.backends`): how the weights run, and whether shapes are static."""
    parser.add_argument(
        "--weights",
        choices=("auto", "stock", "packed"),
        default="auto",
        help="how the target's weights run: auto (default: oneDNN-packed linears where they pay on this CPU, "
        "float32 or bfloat16), packed (every linear), stock (as loaded)",
    )
    parser.add_argument(
        "--invariant",
        choices=("auto", "on", "off"),
        default="auto",
        help="row-invariant numerics, so greedy speculative output equals vanilla's token for token: single rows "
        "padded to two in the packed linears, the attention in float64 on a float64 KV cache (4x the bfloat16 cache's "
        "memory), or on float32 the few-row attention kernel where it serves the model (float32 cache); auto "
        "(default): on for a bfloat16 target with packed linears",
    )
    if drafts:
        parser.add_argument(
            "--draft-weights",
            choices=("auto", "stock", "packed", "int8"),
            default=None,
            help="how EAGLE heads' weights run: auto (default: int8 on a CPU; lossless, the verifier corrects "
            "against the q the draft used), int8, packed, stock",
        )
    if static:
        parser.add_argument(
            "--static-shapes",
            choices=("auto", "on", "off", "aot"),
            default="auto",
            help="run forwards at fixed, bucketed shapes under torch.compile (inductor on CPU, CUDA graphs on GPU); "
            "aot: from the model's ahead-of-time package (CPU; built once per machine, minutes, then loaded in "
            "seconds); auto (default): on for CUDA; on a CPU, from the package where this machine has one, else off",
        )


def target_backend(args: argparse.Namespace) -> dict[str, Any]:
    """``weights`` / ``static_shapes`` / ``invariant`` keyword arguments of :class:`~specdec.target.HFTarget` from the
    options.

    Static shapes compile plain weights (inductor packs them itself): packed or int8 weights with them are refused.
    """
    choice = getattr(args, "static_shapes", "auto")
    static = {"auto": "auto", "on": True, "off": False, "aot": "aot"}[choice]
    if static in (True, "aot") or (static == "auto" and str(getattr(args, "device", "cpu")).startswith("cuda")):
        why = f"--static-shapes {choice}" if static != "auto" else "--static-shapes auto on a CUDA device"
        for option, value in (("--weights", args.weights), ("--draft-weights", getattr(args, "draft_weights", None))):
            if value in ("packed", "int8"):
                raise UsageError(
                    f"{option} {value} cannot run with static shapes ({why}: inductor packs plain weights itself); "
                    f"pass {option} auto or stock, or --static-shapes off"
                )
    invariant = {"auto": "auto", "on": True, "off": False}[getattr(args, "invariant", "auto")]
    return {"weights": args.weights, "static_shapes": static, "invariant": invariant}


def check_applicable(
    args: argparse.Namespace,
    methods: Sequence[str],
    temperatures: Sequence[float],
    flags: tuple[str, str] = ("--method", "--temperature"),
) -> None:
    """Refuse the options that would do nothing for ``methods`` at ``temperatures``, rather than ignore them: a
    method option that none of ``methods`` reads (:attr:`specdec.methods.Method.reads`), a sampled tree's option at
    temperature 0 only or beside ``--sampled-tree off`` (or ``menu`` for the level gate), ``--top-p`` / ``--top-k``
    at temperature 0 only. ``flags``: the options that choose the methods and the temperatures (named in the fix)."""
    from specdec.methods import METHODS

    method_flag, temperature_flag = flags
    names, at = ", ".join(methods), ", ".join(f"{t:g}" for t in temperatures)
    sampling = any(t > 0 for t in temperatures)

    def refuse(option: str, why: str, fix: str) -> NoReturn:
        raise UsageError(f"{option} does nothing {why}; drop {option} or {fix}")

    given = option_values(args)
    read = frozenset().union(*(METHODS[m].reads for m in methods if m in METHODS))  # hf-* read none
    for field in given:
        if field not in read:
            readers = ", ".join(name for name, m in METHODS.items() if field in m.reads)
            refuse(
                OPTION_FLAGS[field], f"for {names}: only {readers} read it", f"choose one of them with {method_flag}"
            )
    sampled_only = (  # (field, the --sampled-tree values that draw no tree it shapes)
        ("sampled_tree", ()),
        ("draft_temperature_ratio", ("off",)),
        ("sampled_level_gate", ("off", "menu", "ranked")),
    )
    for field, unread in sampled_only:
        if field not in given:
            continue
        option = OPTION_FLAGS[field]
        if args.sampled_tree in unread:
            refuse(option, f"with --sampled-tree {args.sampled_tree}", "pass --sampled-tree a fixed shape")
        if not sampling:
            refuse(
                option,
                f"at {temperature_flag} {at}: trees are sampled only at a temperature above 0",
                f"pass {temperature_flag} above 0",
            )
    for option, value in (("--top-p", args.top_p), ("--top-k", args.top_k)):
        if value is not None and not sampling:
            refuse(
                option,
                f"at {temperature_flag} {at}: greedy decoding takes the most likely token",
                f"pass {temperature_flag} above 0",
            )


#: ``--seed``'s help: what a seed does and does not make reproducible.
SEED_HELP = (
    "seed of the sampling generator at T > 0 (default 0). A run repeats token for token where the tree's shape does "
    "not depend on timings (the sampled trees of the EAGLE and small-lm methods, the default); adaptive trees (ngram, "
    "--sampled-tree off, menu or ranked) size themselves from measured costs, so their tokens vary from run to run "
    "(each run still samples the target's distribution)"
)
