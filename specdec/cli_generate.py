"""``specdec generate``: one prompt streamed, or several (``--prompts-file``) decoded together."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from specdec.cli_model import add_model_options, check_head, check_head_fits, load_target_model
from specdec.cli_options import (
    SEED_HELP,
    TEMPERATURE,
    MethodsHelp,
    UsageError,
    add_backend_options,
    add_cache_option,
    add_corpus_option,
    add_sampled_tree_option,
    add_sampling_options,
    at_least,
    cache_size,
    check_applicable,
    method_options,
    sampling_filters,
    target_backend,
)

__all__ = ["add_generate", "cmd_generate", "read_prompts_file"]

DEFAULT_PROMPT = "Explain in three sentences why the sky is blue."


def cmd_generate(args: argparse.Namespace) -> int:
    import time

    import torch

    from specdec.assets import Prompt, chat_ids
    from specdec.generate import GenerationMetrics, StopCondition
    from specdec.methods import build_method, default_method, method_names
    from specdec.rows import batch_shapes
    from specdec.sampling import SamplingParams
    from specdec.target import HFTarget

    method = args.method
    if method is None:  # the best method whose assets are present; with --model, one that needs no head
        method = default_method() if args.model is None else "ngram"
    if method not in method_names():
        raise UsageError(f"unknown method {method!r}; choose --method from {', '.join(method_names())}")
    if not args.prompts_file and not args.prompt.strip():
        raise UsageError('the prompt is empty; pass the text to start from as PROMPT (specdec generate "...")')
    check_applicable(args, [method], [args.temperature])
    options = method_options(args)
    head = check_head(args, [method])
    backend = target_backend(args)
    if args.prompts_file:  # batched rows: eager shapes or the package, not graphs captured here (specdec.rows)
        backend["static_shapes"] = batch_shapes(backend["static_shapes"], args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_target_model(args)
    check_head_fits(args, head, model)
    chat = args.chat if args.chat is not None else tokenizer.chat_template is not None
    if chat and tokenizer.chat_template is None:
        raise UsageError("the tokenizer has no chat template; pass --no-chat to continue raw text")
    texts = read_prompts_file(args.prompts_file) if args.prompts_file else [args.prompt]
    encoded = [chat_ids(tokenizer, Prompt(str(i), text, chat=chat)) for i, text in enumerate(texts)]
    ids = max(encoded, key=len)
    target = HFTarget(model, max_len=cache_size(args, ids.shape[0], model), **backend, in_place=True)
    sampling = SamplingParams(temperature=args.temperature, seed=args.seed, **sampling_filters(args))
    if target.execution.aot:  # load the package now, not inside the timed generation (seconds, once per process)
        target.warm_up()
    generator = build_method(method, target, options)
    eos = sorted({*target.eos_token_ids, tokenizer.eos_token_id} - {None})
    stop = StopCondition(max_new_tokens=args.max_new_tokens, eos_token_ids=eos)
    if args.prompts_file:
        label = f"{method}, {target.execution.label}"
        return _generate_many(generator, encoded, sampling, stop, tokenizer, args, label)
    metrics = GenerationMetrics()
    tokens: list[int] = []
    shown = ""
    t0 = time.perf_counter()
    for token in generator.stream(ids, sampling, stop, metrics=metrics, speculate=args.speculate):
        tokens.append(token)
        text = tokenizer.decode(tokens, skip_special_tokens=True)
        if not text.endswith("\ufffd"):  # wait for the rest of a multi-byte character
            sys.stdout.write(text[len(shown) :] if text.startswith(shown) else "\n" + text)
            sys.stdout.flush()
            shown = text
    wall = time.perf_counter() - t0
    sys.stdout.write("\n")
    print(
        f"[{method}, T={args.temperature:g}, {torch.get_num_threads()} threads, {target.execution.label}] "
        f"{metrics.summary()}; wall {wall:.2f}s incl. streaming",
        file=sys.stderr,  # the text alone goes to stdout (pipe-friendly)
    )
    return 0


def read_prompts_file(path: str) -> list[str]:
    """The prompts of ``--prompts-file``: one per line, or a jsonl file of ``{"prompt": ...}`` (or ``"text"``) lines.

    Raises:
        UsageError: no such file, no prompts in it, or a jsonl line without a prompt.
    """
    import json

    file = Path(path)
    if not file.is_file():
        raise UsageError(f"no prompts file at {path}; pass --prompts-file a text file (one prompt per line) or jsonl")
    lines = [line for line in file.read_text().splitlines() if line.strip()]
    if file.suffix == ".jsonl":
        texts = []
        for n, line in enumerate(lines, 1):
            record = json.loads(line)
            text = record.get("prompt", record.get("text")) if isinstance(record, dict) else None
            if not isinstance(text, str) or not text.strip():
                raise UsageError(f'{path} line {n} has no "prompt" (or "text") string; give every line one')
            texts.append(text)
        lines = texts
    if not lines:
        raise UsageError(f"{path} holds no prompts; put one prompt per line")
    return lines


def _generate_many(generator, encoded, sampling, stop, tokenizer, args: argparse.Namespace, label: str) -> int:
    """``specdec generate --prompts-file``: the prompts decoded together (``--max-batch`` at a time), each answer
    printed in order under a ``### prompt N`` line; per-row figures on stderr. A row that failed alone says why."""
    import time

    from specdec.batched import BatchRowError

    t0 = time.perf_counter()
    try:
        results = generator.generate_batch(
            encoded, sampling, stop, max_batch=args.max_batch, speculate=args.speculate or "auto"
        )
    except BatchRowError as e:
        results = e.results
    wall = time.perf_counter() - t0
    for i, result in enumerate(results):
        print(f"### prompt {i + 1}")
        if result.error is not None:
            print(f"[failed: {type(result.error).__name__}: {result.error}]")
            continue
        print(tokenizer.decode(result.tokens, skip_special_tokens=True))
        print(f"[prompt {i + 1}] {result.metrics.summary()}", file=sys.stderr)
    total = sum(len(r.tokens) for r in results)
    print(f"[{label}] {len(results)} prompts, {total} tokens in {wall:.2f}s: {total / wall:.1f} tok/s", file=sys.stderr)
    return 1 if any(r.error is not None for r in results) else 0


def add_generate(sub: Any) -> None:
    g = sub.add_parser(
        "generate",
        help="stream a speculative generation (SmolLM2-135M-Instruct or --model)",
        formatter_class=MethodsHelp,
    )
    g.add_argument("prompt", nargs="?", default=DEFAULT_PROMPT, help=f"default: {DEFAULT_PROMPT!r}")
    g.add_argument("--method", default=None, help="named method (default: the best one whose assets are present)")
    g.add_argument("--temperature", type=TEMPERATURE, default=0.0, help="0 = greedy (default)")
    add_sampling_options(g)
    g.add_argument("--max-new-tokens", type=at_least(1), default=128)
    add_cache_option(g)
    g.add_argument(
        "--chat",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="wrap the prompt in the chat template (default when the tokenizer has one); --no-chat continues raw text",
    )
    g.add_argument("--seed", type=int, default=0, help=SEED_HELP)
    g.add_argument(
        "--prompts-file",
        default=None,
        help='decode several prompts together: a text file (one prompt per line) or jsonl ({"prompt": ...} lines); '
        "PROMPT is then ignored",
    )
    g.add_argument("--max-batch", type=at_least(1), default=None, help="rows decoded at once (default: all prompts)")
    g.add_argument(
        "--speculate",
        choices=("auto", "always"),
        default=None,
        help="auto: each cycle speculates or takes a plain step, whichever has emitted more tokens per second so far "
        "(exact; sampled tokens then depend on timings); always: every cycle speculates. Default: for one prompt auto "
        "where the method's tree policy holds a steep cost curve (8 tokens >= 1.5 steps, as on an ahead-of-time "
        "package), else always; auto for a --prompts-file batch",
    )
    add_sampled_tree_option(g)
    add_corpus_option(g)
    g.add_argument("--threads", type=at_least(1), default=None, help="torch CPU threads")
    add_backend_options(g)
    add_model_options(g)
    g.set_defaults(func=cmd_generate)
