"""The specdec command: generate, bench, train, data, budget, doctor.

    specdec generate [PROMPT] [--method M] [--temperature T] [--top-p P] [--top-k K] [--max-new-tokens N]
                     [--max-len L] [--chat | --no-chat] [--weights W] [--sampled-tree SHAPE|off]
                     [--corpus FILE]
                     (text streams to stdout, the stats line to stderr)
    specdec bench [--methods ...] [--dataset mtbench|humaneval|spec-bench|FILE] [--temperatures 0 1]
                  [--top-p P] [--top-k K] [--max-new-tokens 128] [--max-len L] [--limit N] [--out DIR]
                  [--tree-sizes 8 16 32 ...] [--sweep-method M] [--threads N] [--fresh] [--sampled-tree SHAPE|off]
                  [--dynamic-rows] [--deferred-rows] [--corpus FILE]
    specdec train {eagle1,hass,eagle3} --out DIR ...
    specdec data regenerate --out DIR --prompts N [--model PATH] [--max-new-tokens 512] [--temperatures 0 0.7]
                            [--batch-size 32] [--loop-window 64] [--capture-features DIR]
    specdec data corpus --data DIR --out FILE [--temperatures 0]
    specdec budget [--refresh] [--sizes 1 2 4 ...] [--repeats N] [--threads N]
    specdec doctor [--dtypes float32 bfloat16] [--refresh] [--threads N]

Everything runs on SmolLM2-135M-Instruct from its installed package unless ``--model`` names another model. Every
user mistake (an unknown method or data set, a number out of range, an option that does nothing for the chosen
method, a head of the wrong kind or for another model, a missing asset, a prompt that does not fit) prints one
``specdec: error: <what is wrong>; <the fix>`` line and exits with code 2; :func:`user_message` is the one place
library errors become that line.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specdec.cli_generate import add_generate
from specdec.cli_measure import add_measuring
from specdec.cli_model import add_model_options, check_head, check_head_fits, load_target_model
from specdec.cli_options import (
    SEED_HELP,
    TEMPERATURE,
    MethodsHelp,
    Parser,
    UsageError,
    add_backend_options,
    add_cache_option,
    add_corpus_option,
    add_sampled_tree_option,
    add_sampling_options,
    at_least,
    check_applicable,
    check_max_len,
    method_options,
    sampling_filters,
    target_backend,
)
from specdec.errors import SpecdecError, error_exit, print_error

__all__ = ["main", "build_parser"]

COMMANDS = ("generate", "bench", "train", "data", "budget", "doctor")


def _method_names() -> list[str]:
    from specdec.bench.runner import all_method_names

    return all_method_names()


# ----------------------------------------------------------------------------------------------- bench
def cmd_bench(args: argparse.Namespace) -> int:
    from specdec.assets import DATASETS
    from specdec.bench import default_methods

    names = _method_names()
    if args.methods is None:  # the best method and its baselines; with --model and no --head: no shipped head fits
        args.methods = ["vanilla", "ngram", "hf-generate"] if args.model and not args.head else default_methods()
    elif args.methods == ["all"]:  # every method and baseline
        from specdec.bench.runner import HF_METHODS

        args.methods = ["vanilla", *HF_METHODS, *(m for m in names if m not in ("vanilla", *HF_METHODS))]
    methods = [*args.methods, *([args.sweep_method] if args.sweep_method else [])]
    for m in methods:
        if m not in names:
            raise UsageError(f"unknown method {m!r}; choose --methods from {', '.join(names)}")
    import json

    from specdec.assets import load_prompts, select_prompts

    if args.dataset not in DATASETS and not Path(args.dataset).is_file():
        if Path(args.dataset).suffix or Path(args.dataset).parent != Path("."):  # a path, not a name
            raise UsageError(f"no dataset file at {args.dataset}; pass --dataset an existing jsonl file")
        raise UsageError(f"unknown dataset {args.dataset!r}; pass --dataset {', '.join(DATASETS)} or a jsonl file path")
    try:
        if not select_prompts(load_prompts(args.dataset), args.limit):
            raise UsageError(f"dataset {args.dataset!r} has no prompts; pass --dataset a file with prompts")
    except (ValueError, json.JSONDecodeError) as e:
        raise UsageError(
            f'cannot read dataset {args.dataset!r}: {e}; pass --dataset a jsonl file of {{"prompt": ...}} lines'
        ) from None
    from specdec.bench import run_bench, write_report
    from specdec.bench.runner import ResumeMismatchError, plan_variants

    check_applicable(args, methods, args.temperatures, flags=("--methods", "--temperatures"))
    if args.batch_sizes and ("hf-prompt-lookup" in methods or args.tree_sizes or args.deferred_rows):
        raise UsageError(
            "--batch-sizes measures the named methods, vanilla and hf-generate: leave out hf-prompt-lookup, "
            "--tree-sizes and --deferred-rows (they run one prompt at a time)"
        )
    options = method_options(args)
    try:
        plan_variants(args.methods, args.tree_sizes or (), args.sweep_method)
    except ValueError as e:
        raise UsageError(str(e)) from None
    head = check_head(args, methods, "--methods")
    config = _bench_config(args, options, **target_backend(args))
    model, tokenizer = load_target_model(args)
    check_head_fits(args, head, model)
    check_max_len(args, model)
    try:
        run_bench(config, model=model, tokenizer=tokenizer, progress=not args.no_progress)
    except ResumeMismatchError as e:
        raise UsageError(str(e)) from None
    if args.batch_sizes:
        print((Path(args.out) / "batch.md").read_text())
        print(f"wrote {Path(args.out) / 'batch.md'} and batch.jsonl", file=sys.stderr)
        return 0
    report = write_report(args.out)
    print(report.read_text())
    print(f"wrote {report} and plots in {args.out}/", file=sys.stderr)
    return 0


def _bench_config(args: argparse.Namespace, options: Any, **backend: Any) -> Any:
    """The :class:`~specdec.bench.config.BenchConfig` of ``specdec bench``'s flags (a refusal names the flag)."""
    from pydantic import ValidationError

    from specdec.bench import BenchConfig

    try:
        return BenchConfig(
            methods=args.methods,
            dataset=args.dataset,
            temperatures=args.temperatures,
            **sampling_filters(args),
            max_new_tokens=args.max_new_tokens,
            max_len=args.max_len,
            limit=args.limit,
            out_dir=args.out,
            resume=not args.fresh,
            threads=args.threads,
            tree_sizes=args.tree_sizes or (),
            sweep_method=args.sweep_method,
            seed=args.seed,
            command="specdec " + " ".join(shlex.quote(a) for a in args.argv),
            options=options,
            **backend,
            deferred_rows=args.deferred_rows,
            dynamic_rows=args.dynamic_rows,
            batch_sizes=tuple(args.batch_sizes or ()),
            speculate=args.speculate,
        )
    except ValidationError as e:  # a backstop: the parser's types refuse these first
        error = e.errors()[0]
        field = str(error["loc"][0]) if error["loc"] else "the options"
        flag = {"out_dir": "--out", "resume": "--fresh"}.get(field, "--" + field.replace("_", "-"))
        raise UsageError(f"{flag}: {str(error['msg']).removeprefix('Value error, ')}; change it") from None


# ----------------------------------------------------------------------------------------------- data
def cmd_data(args: argparse.Namespace) -> int:
    import torch

    from specdec.backends import apply
    from specdec.train.captured import CaptureSettings
    from specdec.train.features import FeatureSpec, eagle3_layers
    from specdec.train.regenerate import RegenerateConfig, regenerate

    try:
        config = RegenerateConfig(
            max_prompt_tokens=args.max_prompt_tokens,
            max_new_tokens=args.max_new_tokens,
            temperatures=tuple(args.temperatures),
            top_p=args.top_p,
            shard_size=args.shard_size,
            batch_size=args.batch_size,
            seed=args.seed,
            loop_window=args.loop_window,
        )
    except ValueError as e:
        raise UsageError(str(e)) from None
    if args.prompts < 1:
        raise UsageError(f"--prompts must be at least 1, got {args.prompts}")
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_target_model(args)
    if tokenizer.chat_template is None:
        raise UsageError(
            f"--model {args.model}: its tokenizer has no chat template, and regenerate answers chat prompts; pass "
            "--model a chat (instruct) model"
        )
    # the batcher runs eagerly and never verifies trees, so row invariance would be pure cost unless asked for; our
    # own model: in place (after the package's target took its own copy)
    invariant = target_backend(args)["invariant"]
    package = _regen_package(model, args.static_shapes, config.cache_slots) if invariant is not True else None
    apply(model, args.weights, static_shapes=False, invariant=False if invariant == "auto" else invariant)
    command = "specdec " + " ".join(shlex.quote(a) for a in args.argv)
    try:
        capture = None
        if args.capture_features:
            layers = eagle3_layers(int(model.config.num_hidden_layers))
            capture = CaptureSettings(args.capture_features, model, FeatureSpec(final=True, layers=layers))
        manifest = regenerate(
            model,
            tokenizer,
            args.out,
            args.prompts,
            config,
            command=command,
            progress=not args.no_progress,
            capture=capture,
            package=package,
        )
    except ValueError as e:
        raise UsageError(str(e)) from None
    shards = manifest["shards"]
    print(
        f"{args.out}: {len(shards)} shards, {sum(s['sequences'] for s in shards)} responses, "
        f"{sum(s['response_tokens'] for s in shards)} response tokens"
    )
    return 0


def _regen_package(model, shapes: str, slots: int):
    """The regeneration steps' package (:mod:`specdec.train.continuous`): ``"aot"`` builds the model's packages where
    this machine has none, ``"auto"`` takes them where it has the model's package, ``"off"``: None (eager shapes)."""
    if shapes == "off":
        return None
    from specdec.target import HFTarget

    limit = getattr(model.config, "max_position_embeddings", None) or slots  # the target's own cache: never read here
    target = HFTarget(model, max_len=min(slots, limit), static_shapes=shapes)  # a prepared copy sharing the tensors
    return target.runner._run if target.execution.aot else None


def cmd_corpus(args: argparse.Namespace) -> int:
    """``specdec data corpus``: a retrieval corpus of a regenerated folder's responses (``--corpus FILE``)."""
    from specdec.drafters.retrieval import RetrievalCorpus
    from specdec.train.shards import response_sequences

    if not args.out.parent.is_dir():
        raise UsageError(f"--out {args.out}: folder {args.out.parent} does not exist; create it or choose another")
    responses, manifest = response_sequences(args.data, tuple(args.temperatures))
    if "model" not in manifest or "vocab_size" not in manifest:
        raise UsageError(f"--data {args.data}: its manifest names no model or vocabulary size; regenerate the data")
    shown = ", ".join(f"{t:g}" for t in args.temperatures)
    notes = {"source": f"responses of {args.data} at temperature {shown}", "model": manifest["model"]}
    RetrievalCorpus.write(responses, manifest["model"], args.out, int(manifest["vocab_size"]), notes)
    total = sum(len(r) for r in responses)
    print(f"{args.out}: {len(responses)} responses, {total} tokens (model {manifest['model']})")
    return 0


def build_parser(with_train: bool = True) -> argparse.ArgumentParser:
    """The argument parser; the ``train`` sub-command's own options load only when ``with_train``."""
    parser = Parser(prog="specdec", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="{" + ",".join(COMMANDS) + "}")
    add_generate(sub)
    _add_bench(sub)
    if with_train:
        from specdec.train.cli import add_train_parser

        add_train_parser(sub)  # sets func=run_train
    else:
        sub.add_parser("train", help="train an EAGLE-1 / HASS / EAGLE-3 head (specdec train --help)", add_help=False)

    _add_data(sub)
    add_measuring(sub)
    return parser


def _add_bench(sub: Any) -> None:
    b = sub.add_parser(
        "bench",
        help="interleaved, resumable benchmark of methods (results.jsonl, results.md, PNGs)",
        formatter_class=MethodsHelp,
    )
    b.add_argument(
        "--methods",
        nargs="+",
        default=None,
        help="methods to run (vanilla always runs): any --method of generate, hf-generate or hf-prompt-lookup; "
        "default: the best method with vanilla and HF generate; all: every method and baseline",
    )
    b.add_argument(
        "--dataset",
        default="mtbench",
        help="mtbench (default), humaneval, spec-bench (480 questions in 6 task families, reported per family) or a "
        "jsonl file",
    )
    b.add_argument(
        "--temperatures", nargs="+", type=TEMPERATURE, default=[0.0], help="default 0 (greedy); e.g. 0 1 for both"
    )
    add_sampling_options(b)
    b.add_argument("--max-new-tokens", type=at_least(1), default=128)
    add_cache_option(b)
    b.add_argument(
        "--limit",
        type=at_least(1),
        default=None,
        help="first N prompts only (spec-bench: first N of each family, interleaved across families)",
    )
    b.add_argument("--out", default="bench", help="output folder (default: bench)")
    b.add_argument("--tree-sizes", nargs="+", type=at_least(1), default=None, help="fixed tree sizes to sweep")
    b.add_argument("--sweep-method", default=None, help="dynamic-tree method of the sweep (default: first one)")
    b.add_argument("--threads", type=at_least(1), default=None, help="torch CPU threads")
    b.add_argument("--seed", type=int, default=0, help=SEED_HELP)
    b.add_argument("--fresh", action="store_true", help="discard earlier results in --out instead of resuming")
    b.add_argument("--no-progress", action="store_true")
    b.add_argument(
        "--batch-sizes",
        nargs="+",
        type=at_least(1),
        default=None,
        help="decode the prompts several at a time, at each of these batch sizes, against batched vanilla and HF "
        "generate (batch.jsonl, batch.md) instead of one at a time",
    )
    b.add_argument(
        "--speculate",
        choices=("always", "auto"),
        default=None,
        help="auto: each speculative method keeps a pace across the prompts, each cycle speculating or taking a "
        "plain step, whichever has emitted more tokens per second so far (exact); always: every cycle speculates; "
        "default: auto where the method's tree policy holds a steep cost curve (8 tokens >= 1.5 steps, as on an "
        "ahead-of-time package), else always",
    )
    b.add_argument(
        "--deferred-rows",
        action="store_true",
        help="also run each adaptive method with the deferred tree budget (rows M+deferred: the tree size rides on "
        "the loop's one host sync per cycle)",
    )
    b.add_argument(
        "--dynamic-rows",
        action="store_true",
        help="also run each method that samples its tree at T > 0 with its dynamic tree (rows M+dynamic, T > 0 only)",
    )
    add_sampled_tree_option(b)
    add_corpus_option(b)
    add_backend_options(b)
    add_model_options(b)
    b.set_defaults(func=cmd_bench)


def _add_data(sub: Any) -> None:
    d = sub.add_parser("data", help="build training data (regenerate: the target's own responses)")
    dsub = d.add_subparsers(dest="data_command", metavar="{regenerate,corpus}", required=True)
    c = dsub.add_parser(
        "corpus", help="a retrieval corpus (--corpus FILE) of a regenerated folder's responses: the target's own text"
    )
    c.add_argument("--data", type=Path, required=True, help="a folder written by `specdec data regenerate`")
    c.add_argument("--out", type=Path, required=True, help="the corpus file to write (.safetensors)")
    c.add_argument(
        "--temperatures", nargs="+", type=float, default=[0.0], help="shards of these temperatures (default 0)"
    )
    c.set_defaults(func=cmd_corpus)
    r = dsub.add_parser(
        "regenerate",
        help="the target's own responses to ShareGPT first turns (SmolLM2 or --model), in resumable shards",
    )
    r.add_argument("--out", required=True, help="output folder (manifest.json + shards); reruns resume it")
    r.add_argument("--prompts", type=int, required=True, help="grow the data set to this many prompts (whole shards)")
    r.add_argument("--max-new-tokens", type=int, default=512)
    r.add_argument("--max-prompt-tokens", type=int, default=256, help="skip longer prompts (default 256)")
    r.add_argument("--temperatures", nargs="+", type=float, default=[0.0, 0.7], help="one per shard, in turn")
    r.add_argument("--top-p", type=float, default=1.0)
    r.add_argument("--shard-size", type=int, default=64, help="prompts per shard (default 64)")
    r.add_argument("--batch-size", type=int, default=32, help="rows decoding together (default 32)")
    r.add_argument(
        "--loop-window",
        type=int,
        default=64,
        help="cut a response once its last N tokens repeat the N before them at a period <= N/2 (0 = never; "
        "default 64)",
    )
    r.add_argument("--seed", type=int, default=0)
    r.add_argument(
        "--capture-features",
        default=None,
        metavar="DIR",
        help="also keep the target features every recipe trains on (final + EAGLE-3's fused layers, bf16) in DIR; "
        "`specdec train --captured-features DIR` then skips their extraction",
    )
    r.add_argument("--threads", type=at_least(1), default=None, help="torch CPU threads")
    r.add_argument("--no-progress", action="store_true")
    r.add_argument(
        "--static-shapes",
        choices=("auto", "off", "aot"),
        default="auto",
        help="the decoding steps on the model's ahead-of-time batch package: aot (built once per machine where "
        "missing, minutes), auto (default: where this machine has the model's package), off (eager shapes)",
    )
    add_backend_options(r, drafts=False, static=False)
    add_model_options(r, head=False, device=False)  # the batcher runs on the CPU, in float32
    r.set_defaults(func=cmd_data)


def _quiet_transformers() -> None:
    """No weight-loading progress bars between our own output."""
    from transformers.utils import logging

    logging.disable_progress_bar()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``specdec`` command; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(with_train=first == "train")
    try:
        args, unknown = parser.parse_known_args(argv)
    except SystemExit as e:  # --help printed (code 0)
        return int(e.code or 0)
    except UsageError as e:  # Parser.error: a missing or malformed value, an unknown command or choice
        return print_error(str(e))
    if args.command is None:
        return print_error(f"no command given; choose one of {', '.join(COMMANDS)} (see specdec --help)")
    if unknown:
        command = " ".join(c for c in (args.command, getattr(args, "data_command", None)) if c)
        return print_error(f"unrecognized arguments: {' '.join(unknown)}; see specdec {command} --help")
    args.argv = argv
    _quiet_transformers()
    try:
        return int(args.func(args) or 0)
    except SpecdecError as e:  # every error the library raises on purpose: bad input, a missing asset, a refusal
        return error_exit(e, args.command)
    except KeyboardInterrupt:
        print("\nspecdec: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
