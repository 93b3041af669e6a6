"""Run methods side by side on one target: interleaved per prompt, one JSON line per measurement, resumable.

For each temperature, for each prompt, every method runs once, in an order rotated by the prompt index (so no
method always runs first or last on a shared machine). Each (prompt, method, temperature) appends one line to
``out_dir/results.jsonl`` as soon as it is measured; a rerun skips the triples already there. Vanilla decoding
always runs: it is the baseline of the speedups and, at T=0, the reference every method must reproduce token
for token. A row measured before its prompt's vanilla row (rotation) waits in memory until vanilla has run,
so an interrupt loses at most those rows.

Before the first generation one line on stderr says how many generations the run owes (and how many a resumed
folder already holds) and about how long they take, timed on vanilla on this machine (:mod:`specdec.bench.plan`).
Without ``methods`` the run is the best method and its baselines at T = 0 (:func:`~specdec.bench.plan.default_methods`).

Besides the named methods of :mod:`specdec.methods`:

* ``hf-generate``: Hugging Face ``model.generate`` (greedy, or sampling at the same temperature with top-k and
  top-p off), on a copy of the model's generation config with the same EOS id as ours and ``pad = eos``;
* ``hf-prompt-lookup``: the same with ``prompt_lookup_num_tokens`` (HF's n-gram assisted decoding).

Row fields (``status == "ok"``): ``prompt_id``, ``family`` (the prompt's task family, Spec-Bench; else null),
``method`` (the row label), ``base_method``, ``tree_size``
(fixed size, ``"adaptive"``, ``"sampled SHAPE"`` for a sampled tree at T > 0, ``"sampled SHAPE at 0.7T"`` where
its draws are at a ratio of the temperature, or null), ``temperature``,
``max_new_tokens``, ``seed``, ``prompt_tokens``,
``new_tokens``, ``tokens``, ``finish_reason``, ``time_total`` (prefill included), ``time_prefill``,
``tokens_per_second``, ``tau`` (null for HF methods), ``cycles``, ``accept_lengths``, ``tree_depths``,
``tree_sizes``, ``acceptance_per_depth``, ``time_phases`` (seconds) and ``time_split`` (fractions of decode time),
and at T=0 ``greedy_equal`` and ``first_diff`` (position, tokens and the vanilla top-2 logit margin there: a
margin below :data:`NEAR_TIE` means the divergence is a floating-point near-tie, not a bug).
Rows with ``status == "skipped"`` carry the ``reason`` (missing assets); ``"error"`` rows the exception.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from specdec.assets import Prompt, chat_ids, load_prompts, select_prompts
from specdec.backends.kernels import cpu_name
from specdec.bench.baselines import HFGenerate
from specdec.bench.plan import (
    DEFAULT_TEMPERATURES,
    WARMUP_TOKENS,
    Generation,
    default_methods,
    estimate_seconds,
    measured_slowdowns,
    plan_line,
    probe_vanilla,
    progress_bar,
)
from specdec.bench.records import NEAR_TIE, ResultsFile, first_difference, row_key
from specdec.errors import SpecdecError
from specdec.generate import GenerationMetrics, StopCondition
from specdec.kvcache import CacheFullError
from specdec.method_options import ADAPTIVE_OPTIONS, SAMPLED_OPTIONS
from specdec.methods import METHODS, MethodOptions, build_method, method, method_names, sampled_tree_of
from specdec.models import MissingAssetError
from specdec.sampling import SamplingParams
from specdec.target import HFTarget

__all__ = [
    "HF_METHODS",
    "NEAR_TIE",
    "Variant",
    "all_method_names",
    "first_difference",
    "hardware_info",
    "plan_variants",
    "row_key",
    "run_bench",
]

HF_METHODS = ("hf-generate", "hf-prompt-lookup")
PROMPT_LOOKUP_TOKENS = 10


def all_method_names() -> list[str]:
    """Every name ``run_bench`` accepts: the named methods and the Hugging Face baselines."""
    return method_names() + list(HF_METHODS)


@dataclass(frozen=True)
class Variant:
    """One row label of the benchmark: a method, optionally at a forced tree size."""

    name: str
    method: str
    # fixed size, "adaptive" or None (no dynamic tree); result rows say "sampled SHAPE" where the method samples
    tree_size: int | str | None = None
    options: MethodOptions = field(default_factory=MethodOptions)
    sampling_only: bool = False  # differs from its base row only at T > 0 (not run at T = 0)


def plan_variants(
    methods: Sequence[str],
    tree_sizes: Sequence[int] = (),
    sweep_method: str | None = None,
    options: MethodOptions | None = None,
    deferred_rows: bool = False,
    dynamic_rows: bool = False,
) -> list[Variant]:
    """Row labels to run: vanilla first, then ``methods``, then ``sweep_method@m`` for each fixed size ``m``, then
    (``deferred_rows``) ``M+deferred`` for each adaptive dynamic-tree method ``M``: the same method with
    ``MethodOptions.deferred_budget`` on, for a side-by-side comparison, then (``dynamic_rows``) ``M+dynamic`` for
    each method that draws a sampled tree at T > 0: the same method with its dynamic tree (run at T > 0 only).

    The default options make dynamic-tree methods adaptive, so ``ngram`` itself is the sweep's adaptive row.
    """
    options = options or MethodOptions()
    adaptive = "adaptive" if options.total_tokens is None else options.total_tokens
    unknown = [m for m in [*methods, *([sweep_method] if sweep_method else [])] if m not in all_method_names()]
    if unknown:
        raise ValueError(f"unknown method {unknown[0]!r}; choose from {', '.join(all_method_names())}")
    names = ["vanilla"] + [m for m in dict.fromkeys(methods) if m != "vanilla"]
    dynamic_methods = [name for name, m in METHODS.items() if m.dynamic_tree]
    variants = [Variant(m, m, adaptive if m in dynamic_methods else None, options) for m in names]
    # the rows of a dynamic tree at every temperature: no sampled-tree options
    unsampled = options.only(options.given - set(SAMPLED_OPTIONS)).replace(sampled_tree=None)
    if tree_sizes:
        sweep = sweep_method or next((m for m in names if m in dynamic_methods), None)
        if sweep is None or sweep not in dynamic_methods:
            raise ValueError(f"--tree-sizes needs a dynamic-tree method ({', '.join(dynamic_methods)})")
        if sweep not in names:
            variants.append(Variant(sweep, sweep, adaptive, options))
        fixed = unsampled.only(unsampled.given - set(ADAPTIVE_OPTIONS))
        for m in sorted(set(tree_sizes)):
            if m < 2:
                raise ValueError(f"tree sizes count the root and must be at least 2, got {m}")
            variants.append(Variant(f"{sweep}@{m}", sweep, m, fixed.replace(total_tokens=m)))
    if deferred_rows and adaptive == "adaptive" and options.deferred_budget is not True:
        deferred = unsampled.replace(deferred_budget=True)  # the adaptive tree at any T
        dynamic = [v.method for v in variants if v.tree_size == "adaptive"]
        variants += [Variant(f"{m}+deferred", m, "adaptive", deferred) for m in dynamic]
    if dynamic_rows and options.sampled_tree is not None:
        sampled = [
            v.method for v in variants if v.name == v.method and v.method in METHODS and METHODS[v.method].sampled_tree
        ]
        variants += [Variant(f"{m}+dynamic", m, adaptive, unsampled, sampling_only=True) for m in sampled]
    return variants


def hardware_info(device: torch.device | str = "cpu") -> dict:
    """What the numbers were measured on: CPU model (family and model numbers), threads, torch, device, date."""
    cpu = cpu_name()
    device = torch.device(device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    import transformers

    return {
        "cpu": cpu,
        "logical_cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "device": name,
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
    }


# ----------------------------------------------------------------------------------------------- rows
def _tree_label(variant: Variant, sampling: SamplingParams) -> int | str | None:
    """The row's tree: the variant's (fixed size, ``"adaptive"``, None) or ``"sampled SHAPE"`` where it samples."""
    shape = sampled_tree_of(variant.method, sampling, variant.options)
    if shape is None:
        return variant.tree_size
    ratio = variant.options.draft_temperature_ratio
    gate = " gated" if variant.options.sampled_level_gate else ""
    return f"sampled {shape}{gate}" + ("" if ratio == 1.0 else f" at {ratio:g}T")


class ResumeMismatchError(SpecdecError, ValueError):
    """A results folder holds rows of a row label measured with another tree than this run would use."""


def _check_resumed_filters(
    rows: list[dict], temperatures: Sequence[float], top_p: float, top_k: int, out: Path
) -> None:
    """Refuse to resume ``out`` where rows at a temperature > 0 of this run were sampled with other top-p / top-k
    filters (rows without the fields predate them: no filters); greedy rows and other temperatures do not mix."""
    sampled = {float(t) for t in temperatures if float(t) > 0}
    for r in rows:
        if r.get("status") == "ok" and float(r["temperature"]) in sampled:
            theirs = (float(r.get("top_p", 1.0)), int(r.get("top_k", 0)))
            if theirs != (float(top_p), int(top_k)):
                raise ResumeMismatchError(
                    f"{out} holds rows at T={float(r['temperature']):g} sampled with top_p={theirs[0]:g}, "
                    f"top_k={theirs[1]}, and this run would use top_p={top_p:g}, top_k={top_k}; pass the same "
                    "--top-p/--top-k, --fresh, or another --out"
                )


def _check_resumed_trees(rows: list[dict], variants: Sequence[Variant], out: Path) -> None:
    """Refuse to resume ``out`` where a row of this run's labels was measured with another tree (a sampled tree
    against a dynamic one, after a change of ``--sampled-tree`` or of the default): the report would pool them."""
    by_name = {v.name: v for v in variants}
    for r in rows:
        v = by_name.get(r.get("method"))
        if r.get("status") != "ok" or v is None:
            continue
        want = _tree_label(v, SamplingParams(temperature=float(r["temperature"])))
        if r.get("tree_size") != want:
            raise ResumeMismatchError(
                f"{out}: {r['method']} at T={float(r['temperature']):g} was measured with tree {r.get('tree_size')!r} "
                f"and this run would use {want!r}; pass --fresh, or another --out"
            )


def _check_resumed_target(out: Path, has_rows: bool, backend: str, dtype: str) -> None:
    """Refuse to resume ``out`` where its last run measured another target backend or dtype (``runs.jsonl``; runs that
    predate the fields are not checked): the report would pool rows of two different targets."""
    runs = out / "runs.jsonl"
    if not has_rows or not runs.is_file():
        return
    metas = [json.loads(line) for line in runs.read_text().splitlines() if line.strip()]
    last = metas[-1] if metas else {}
    theirs = (last.get("backend", backend), last.get("dtype", dtype))
    if theirs != (backend, dtype):
        raise ResumeMismatchError(
            f"{out} holds rows measured on a {theirs[1]} target with backend {theirs[0]!r}, and this run's target is "
            f"{dtype} with backend {backend!r}; pass the same --dtype/--weights/--invariant/--static-shapes, --fresh, "
            "or another --out"
        )


def result_row(
    variant: Variant, prompt: Prompt, ids: torch.Tensor, sampling: SamplingParams, stop: StopCondition, result
) -> dict:
    m: GenerationMetrics = result.metrics
    speculative = variant.method not in HF_METHODS
    phases = {
        "prefill": m.time_prefill,
        "draft": m.time_draft,
        "target": m.time_target,
        "verify": m.time_verify,
        "bookkeeping": m.time_bookkeeping,
    }
    return {
        "status": "ok",
        "prompt_id": prompt.id,
        "family": prompt.family,
        "method": variant.name,
        "base_method": variant.method,
        "tree_size": _tree_label(variant, sampling),
        "temperature": float(sampling.temperature),
        "max_new_tokens": stop.max_new_tokens,
        "seed": sampling.seed,
        "top_p": float(sampling.top_p),
        "top_k": int(sampling.top_k or 0),
        "prompt_tokens": int(ids.shape[0]),
        "new_tokens": m.new_tokens,
        "tokens": list(result.tokens),
        "finish_reason": result.finish_reason,
        "time_total": m.time_total,
        "time_prefill": m.time_prefill,
        "tokens_per_second": m.tokens_per_second,
        "tau": m.tau if speculative and m.cycles else None,
        "cycles": m.cycles if speculative else None,
        "accept_lengths": m.accept_lengths if speculative else None,
        "tree_depths": m.tree_depths if speculative else None,
        "tree_sizes": m.tree_sizes if speculative else None,
        "acceptance_per_depth": m.acceptance_per_depth() if speculative else None,
        "time_phases": phases if speculative else None,
        "time_split": m.time_split() if speculative else None,
        "greedy_equal": None,
        "first_diff": None,
    }


def _status_row(variant: Variant, temperature: float, max_new_tokens: int, status: str, reason: str) -> dict:
    return {
        "status": status,
        "prompt_id": None,
        "method": variant.name,
        "base_method": variant.method,
        "tree_size": _tree_label(variant, SamplingParams(temperature=temperature)),
        "temperature": float(temperature),
        "max_new_tokens": max_new_tokens,
        "reason": reason,
    }


def _build(variant: Variant, model, tokenizer, target: HFTarget, sampling: SamplingParams):
    if variant.method == "hf-generate":
        return HFGenerate(model, tokenizer.eos_token_id)
    if variant.method == "hf-prompt-lookup":
        return HFGenerate(model, tokenizer.eos_token_id, prompt_lookup=PROMPT_LOOKUP_TOKENS)
    # one set of options serves every row: each method takes the ones it reads (the command line has refused an
    # option that no chosen method reads)
    return build_method(variant.method, target, method(variant.method).narrow(variant.options))


def _max_tree(variants: Iterable[Variant]) -> int:
    return max(
        [v.options.total_tokens or v.options.max_total_tokens for v in variants if v.tree_size is not None] + [64]
    )


def _announce(
    labels_at: dict[float, int],
    encoded: Sequence[torch.Tensor],
    todo: Sequence[Generation],
    target: HFTarget,
    max_new_tokens: int,
    measured: Sequence[dict],
) -> str:
    """The line said before the first generation: what the run owes and how long it should take, from vanilla
    timed here on the shortest prompt and the slowdowns ``measured`` (rows already in the folder) or assumed
    (:mod:`specdec.bench.plan`)."""
    done = len(encoded) * sum(labels_at.values()) - len(todo)
    if not todo:
        return plan_line(labels_at, len(encoded), done)
    probe = probe_vanilla(target, min(encoded, key=len))
    seconds = estimate_seconds(todo, probe, max_new_tokens, measured_slowdowns(measured, max_new_tokens))
    return plan_line(labels_at, len(encoded), done, seconds, probe)


# ----------------------------------------------------------------------------------------------- the run
def run_bench(
    methods: Sequence[str] | None,
    dataset: str | Sequence[Prompt],
    temperatures: Sequence[float] = DEFAULT_TEMPERATURES,
    max_new_tokens: int = 128,
    limit: int | None = None,
    out_dir: str | Path = "bench",
    resume: bool = True,
    threads: int | None = None,
    tree_sizes: Sequence[int] = (),
    sweep_method: str | None = None,
    seed: int = 0,
    command: str | None = None,
    progress: bool = True,
    options: MethodOptions | None = None,
    model=None,
    tokenizer=None,
    weights: str = "auto",
    static_shapes: bool | str = "auto",
    invariant: bool | str = "auto",
    deferred_rows: bool = False,
    dynamic_rows: bool = False,
    top_p: float = 1.0,
    top_k: int = 0,
    max_len: int | None = None,
) -> Path:
    """Measure ``methods`` (vanilla always included) on ``dataset`` at each temperature; returns the results file.

    Args:
        methods: named methods (:func:`specdec.methods.method_names`) and/or ``hf-generate``,
            ``hf-prompt-lookup``; None: :func:`~specdec.bench.plan.default_methods` (the best method, vanilla and
            HF ``generate``).
        dataset: ``mtbench``, ``humaneval``, ``spec-bench``, a jsonl path, or a list of
            :class:`~specdec.assets.Prompt`.
        temperatures: 0 is greedy (with the token-for-token check against vanilla); default T = 0 only.
        max_new_tokens: generation budget per prompt (EOS stops earlier).
        limit: first ``limit`` prompts only; where the prompts carry families (Spec-Bench), the first ``limit`` of
            each family, interleaved across families (:func:`specdec.assets.select_prompts`).
        out_dir: folder of ``results.jsonl`` and ``runs.jsonl`` (one line per invocation: command, hardware).
        resume: skip measurements already in ``results.jsonl`` (else the file is started afresh).
        threads: ``torch.set_num_threads`` for the run (default: leave as is).
        tree_sizes: fixed tree sizes of the sweep (rows ``METHOD@m``) next to the adaptive default.
        sweep_method: the dynamic-tree method to sweep (default: the first one in ``methods``).
        seed: prompt ``i`` samples with seed ``seed + i`` (every method alike).
        command: the command line to record (default: none).
        progress: show a tqdm bar (its remaining time from this run's rate; resumed rows count as done).
        options: tree and drafter settings of the named methods (default :class:`MethodOptions`).
        model, tokenizer: the target (default: SmolLM2-135M-Instruct).
        weights, static_shapes, invariant: the backend choices of our target (:mod:`specdec.backends`). Our target
            runs a transformed copy; the HF baselines run ``model`` as passed (stock), as a user of ``generate`` would:
            the fast path is ours to be measured against it.
        deferred_rows: also run each adaptive method with the deferred tree budget (rows ``M+deferred``).
        dynamic_rows: also run each method that samples its tree at T > 0 with its dynamic tree (rows
            ``M+dynamic``, at T > 0 only).
        top_p, top_k: the sampling filters of every method at T > 0 (HF ``generate`` gets the same ones); recorded
            in each row, and a folder measured with other filters is refused rather than pooled.
        max_len: the target's cache (default: the longest prompt + ``max_new_tokens`` + the largest tree).

    Raises:
        CacheFullError: ``max_len`` cannot hold the longest prompt, ``max_new_tokens`` and the largest tree.
        ResumeMismatchError: ``out_dir`` holds rows measured with another tree or other sampling filters.
    """
    if methods is None:
        methods = default_methods()
    temperatures = list(dict.fromkeys(float(t) for t in temperatures))  # a temperature given twice runs once
    variants = plan_variants(methods, tree_sizes, sweep_method, options, deferred_rows, dynamic_rows)
    prompts = select_prompts(load_prompts(dataset) if isinstance(dataset, str) else list(dataset), limit)
    if not prompts:
        raise ValueError("no prompts to run")
    if threads:
        torch.set_num_threads(threads)
    if model is None:
        from specdec.models import load_smollm2

        model, tokenizer = load_smollm2()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = ResultsFile(out / "results.jsonl")
    if not resume and results.path.exists():
        results.path.unlink()
    _check_resumed_trees(results.rows(), variants, out)
    _check_resumed_filters(results.rows(), temperatures, top_p, top_k, out)
    done = results.done()
    device = model.get_output_embeddings().weight.device
    encoded = [chat_ids(tokenizer, p).to(device) for p in prompts]
    limit_len = getattr(model.config.get_text_config(), "max_position_embeddings", None) or 1 << 30
    longest, tree = max(e.shape[0] for e in encoded), _max_tree(variants)
    needed = longest + max_new_tokens + tree + 8
    if max_len is not None and max_len < needed:
        raise CacheFullError(
            f"the longest prompt ({longest} tokens) + max_new_tokens ({max_new_tokens}) + the largest tree ({tree}) "
            f"+ 8 need a cache of {needed}, more than max_len {max_len}"
        )
    max_len = min(needed, limit_len) if max_len is None else max_len
    # The HF baselines run the model as loaded; our target runs a copy that shares its tensors (model is unchanged).
    hf_model = model
    target = HFTarget(model, max_len=max_len, weights=weights, static_shapes=static_shapes, invariant=invariant)
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    dtype = str(target.dtype).removeprefix("torch.")
    _check_resumed_target(out, bool(results.rows()), target.execution.label, dtype)

    meta = {
        "command": command,
        "hardware": hardware_info(device),
        "backend": target.execution.label,
        "execution": target.execution.describe(),
        "dtype": dtype,
        "methods": [v.name for v in variants],
        "dataset": dataset if isinstance(dataset, str) else "custom",
        "temperatures": [float(t) for t in temperatures],
        "max_new_tokens": max_new_tokens,
        "prompts": len(prompts),
        "limit": limit,
        "tree_sizes": list(tree_sizes),
        "top_p": float(top_p),
        "top_k": int(top_k),
    }
    with (out / "runs.jsonl").open("a") as f:
        f.write(json.dumps(meta) + "\n")

    # Vanilla greedy references already measured (resume).
    reference: dict[str, list[int]] = {
        r["prompt_id"]: r["tokens"]
        for r in results.rows()
        if r.get("status") == "ok"
        and r["method"] == "vanilla"
        and float(r["temperature"]) == 0.0
        and int(r["max_new_tokens"]) == max_new_tokens
    }
    rows_at = {float(t): [v for v in variants if not (v.sampling_only and float(t) == 0.0)] for t in temperatures}
    todo = [
        Generation(v.name, v.method, t, int(ids.shape[0]))
        for t, rows in rows_at.items()
        for v in rows
        for p, ids in zip(prompts, encoded, strict=True)
        if (p.id, v.name, t, max_new_tokens) not in done
    ]
    labels_at = {t: len(rows) for t, rows in rows_at.items()}
    print(_announce(labels_at, encoded, todo, target, max_new_tokens, results.rows()), file=sys.stderr)
    total = len(prompts) * sum(labels_at.values())
    bar = progress_bar(total, total - len(todo), progress)
    for temperature in temperatures:
        temperature = float(temperature)
        base = SamplingParams(temperature=temperature, seed=seed, top_p=top_p, top_k=top_k)
        key = (temperature, max_new_tokens)
        todo = [v for v in rows_at[temperature] if any((p.id, v.name, *key) not in done for p in prompts)]
        built = {}
        for v in todo:
            try:
                built[v.name] = _build(v, hf_model, tokenizer, target, base)
            except Exception as e:  # missing assets are expected; anything else is reported, not fatal
                status = "skipped" if isinstance(e, MissingAssetError) else "error"
                reason = str(e) if status == "skipped" else f"{type(e).__name__}: {e}"
                results.append(_status_row(v, temperature, max_new_tokens, status, reason))
                bar.write(f"{status} {v.name}: {reason}")
                bar.total -= sum((p.id, v.name, temperature, max_new_tokens) not in done for p in prompts)
                bar.refresh()  # not run: off the total, so it does not pass for fast work in the rate
        if not built:
            continue
        warm_stop = StopCondition(max_new_tokens=WARMUP_TOKENS)
        for gen in built.values():  # first-call costs (allocations, kernels) stay out of the timed runs
            gen.generate(encoded[0], base, warm_stop)
        order = [v for v in variants if v.name in built]
        for i, (prompt, ids) in enumerate(zip(prompts, encoded, strict=True)):
            sampling = SamplingParams(temperature=temperature, seed=seed + i, top_p=top_p, top_k=top_k)
            stop = StopCondition(max_new_tokens=max_new_tokens, eos_token_ids=eos)
            rotated = order[i % len(order) :] + order[: i % len(order)]
            waiting: list[dict] = []
            for v in rotated:
                if (prompt.id, v.name, temperature, max_new_tokens) in done:
                    continue
                bar.set_postfix_str(f"{v.name} T={temperature:g} {prompt.id}")
                try:
                    result = built[v.name].generate(ids, sampling, stop)
                except Exception as e:  # a failing method must not lose the others' measurements
                    results.append(_status_row(v, temperature, max_new_tokens, "error", f"{type(e).__name__}: {e}"))
                    bar.write(f"error in {v.name} on {prompt.id}: {type(e).__name__}: {e}")
                    bar.update(1)
                    continue
                row = result_row(v, prompt, ids, sampling, stop, result)
                bar.update(1)
                if temperature == 0.0 and v.name == "vanilla":
                    reference[prompt.id] = row["tokens"]
                    row["greedy_equal"] = True
                waiting.append(row)
                if temperature == 0.0 and prompt.id not in reference:
                    continue  # compared (and written) once vanilla has run for this prompt
                for r in waiting:
                    if temperature == 0.0 and r["method"] != "vanilla":
                        diff = first_difference(model, ids, reference[prompt.id], r["tokens"])
                        r["greedy_equal"], r["first_diff"] = diff is None, diff
                    results.append(r)
                waiting = []
            for r in waiting:  # only if vanilla failed: keep the rows without the comparison
                results.append(r)
    bar.close()
    return results.path
