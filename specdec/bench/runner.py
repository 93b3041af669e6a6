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
``compiles`` (graphs compiled during the generation: none expected, since each generator's shapes are compiled
before the first timed generation by :func:`specdec.warm.warm_up`; the report says where any were),
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
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from specdec.assets import Prompt, chat_ids, load_prompts, select_prompts
from specdec.backends.compiled import compiled_graphs
from specdec.backends.cpu import cpu_name
from specdec.bench.baselines import HFGenerate
from specdec.bench.batched import run_batched
from specdec.bench.config import BenchConfig
from specdec.bench.plan import (
    WARMUP_TOKENS,
    Generation,
    default_methods,
    estimate_seconds,
    measured_slowdowns,
    plan_line,
    probe_vanilla,
    progress_bar,
)
from specdec.bench.records import NEAR_TIE, ResultsFile, first_difference, result_row, row_key, status_row
from specdec.bench.resume import ResumeMismatchError, check_resumed_filters, check_resumed_target, check_resumed_trees
from specdec.bench.variants import HF_METHODS, Variant, all_method_names, max_tree, plan_variants
from specdec.errors import SpecdecError
from specdec.generate import SpeculativeGenerator, StopCondition, VanillaGenerator
from specdec.kvcache import CacheFullError
from specdec.methods import build_method, method
from specdec.models import MissingAssetError
from specdec.pace import Pace
from specdec.rows import batch_shapes
from specdec.sampling import SamplingParams
from specdec.target import HFTarget
from specdec.warm import warm_up

__all__ = [
    "HF_METHODS",
    "NEAR_TIE",
    "ResumeMismatchError",
    "Variant",
    "all_method_names",
    "first_difference",
    "hardware_info",
    "plan_variants",
    "row_key",
    "run_bench",
]

PROMPT_LOOKUP_TOKENS = 10


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


def _build(variant: Variant, model, tokenizer, target: HFTarget, sampling: SamplingParams):
    if variant.method == "hf-generate":
        return HFGenerate(model, tokenizer.eos_token_id)
    if variant.method == "hf-prompt-lookup":
        return HFGenerate(model, tokenizer.eos_token_id, prompt_lookup=PROMPT_LOOKUP_TOKENS)
    # one set of options serves every row: each method takes the ones it reads (the command line has refused an
    # option that no chosen method reads)
    return build_method(variant.method, target, method(variant.method).narrow(variant.options))


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
def run_bench(config: BenchConfig, model=None, tokenizer=None, progress: bool = True) -> Path:
    """Measure ``config.methods`` (vanilla always included) on ``config.dataset`` at each temperature, in phases:
    plan the rows, build the target, then per temperature build and warm each row's generator and measure it prompt
    by prompt (the rows rotated); returns the results file (:func:`~specdec.bench.output.write_report` reports it).

    Args:
        config: what to measure (:class:`~specdec.bench.config.BenchConfig`, validated when made).
        model, tokenizer: the target (default: SmolLM2-135M-Instruct).
        progress: show a tqdm bar (its remaining time from this run's rate; resumed rows count as done).

    Raises:
        CacheFullError: ``config.max_len`` cannot hold the longest prompt, ``max_new_tokens`` and the largest tree.
        ResumeMismatchError: ``config.out_dir`` holds rows measured with another tree or other sampling filters.
    """
    c = config
    methods = c.methods if c.methods is not None else default_methods()
    temperatures = list(c.temperatures)
    max_new_tokens, top_p, top_k = c.max_new_tokens, c.top_p, c.top_k
    variants = plan_variants(methods, c.tree_sizes, c.sweep_method, c.options, c.deferred_rows, c.dynamic_rows)
    prompts = select_prompts(load_prompts(c.dataset) if isinstance(c.dataset, str) else list(c.dataset), c.limit)
    if not prompts:
        raise ValueError("no prompts to run")
    if c.threads:
        torch.set_num_threads(c.threads)
    if model is None:
        from specdec.models import load_smollm2

        model, tokenizer = load_smollm2()
    out = c.out_dir
    out.mkdir(parents=True, exist_ok=True)
    results = ResultsFile(out / "results.jsonl")
    if not c.resume and results.path.exists():
        results.path.unlink()
    check_resumed_trees(results.rows(), variants, out)
    check_resumed_filters(results.rows(), temperatures, top_p, top_k, out)
    device = model.get_output_embeddings().weight.device
    encoded = [chat_ids(tokenizer, p).to(device) for p in prompts]
    max_len = _cache_size(model, encoded, max_new_tokens, max_tree(variants), c.max_len)
    # The HF baselines run the model as loaded; our target runs a copy that shares its tensors (model is unchanged).
    # several prompts at a time: eager shapes or the package, not graphs captured in this process (specdec.rows)
    static = batch_shapes(c.static_shapes, device) if c.batch_sizes else c.static_shapes
    target = HFTarget(model, max_len=max_len, weights=c.weights, static_shapes=static, invariant=c.invariant)
    if c.batch_sizes:  # several prompts at a time: its own rows (specdec.bench.batched)
        return run_batched(c, model, tokenizer, target, encoded, methods, out)
    dtype = str(target.dtype).removeprefix("torch.")
    check_resumed_target(out, bool(results.rows()), target.execution.label, dtype, c.speculate)
    run_info = dict(command=c.command, dataset=c.dataset_name, limit=c.limit, speculate=c.speculate)
    _record_run(
        out, target, dtype, variants, temperatures, len(prompts), max_new_tokens, c.tree_sizes, top_p, top_k, run_info
    )
    run = _Run(
        model,
        tokenizer,
        target,
        prompts,
        encoded,
        results,
        results.done(),
        max_new_tokens,
        c.seed,
        top_p,
        top_k,
        speculate=c.speculate,
    )
    rows_at = {float(t): [v for v in variants if not (v.sampling_only and float(t) == 0.0)] for t in temperatures}
    todo = [
        Generation(v.name, v.method, t, int(ids.shape[0]))
        for t, rows in rows_at.items()
        for v in rows
        for p, ids in zip(prompts, encoded, strict=True)
        if run.owed(p, v, t)
    ]
    labels_at = {t: len(rows) for t, rows in rows_at.items()}
    print(_announce(labels_at, encoded, todo, target, max_new_tokens, results.rows()), file=sys.stderr)
    total = len(prompts) * sum(labels_at.values())
    run.bar = progress_bar(total, total - len(todo), progress)
    for temperature in temperatures:
        built = run.build(rows_at[temperature], temperature)
        if built:
            run.measure(built, [v for v in variants if v.name in built], temperature)
    run.bar.close()
    return results.path


def _record_run(
    out: Path,
    target: HFTarget,
    dtype: str,
    variants: Sequence[Variant],
    temperatures: Sequence[float],
    prompts: int,
    max_new_tokens: int,
    tree_sizes: Sequence[int],
    top_p: float,
    top_k: int,
    info: dict,
) -> None:
    """Append this invocation's line to ``out/runs.jsonl``: the command, hardware, backend and settings (``info``:
    command, dataset, limit, speculate)."""
    meta = {
        "command": info["command"],
        "hardware": hardware_info(target.device),
        "backend": target.execution.label,
        "execution": target.execution.describe(),
        "dtype": dtype,
        "methods": [v.name for v in variants],
        "dataset": info["dataset"],
        "temperatures": [float(t) for t in temperatures],
        "max_new_tokens": max_new_tokens,
        "prompts": prompts,
        "limit": info["limit"],
        "tree_sizes": list(tree_sizes),
        "top_p": float(top_p),
        "top_k": int(top_k),
        "speculate": info.get("speculate"),
    }
    with (out / "runs.jsonl").open("a") as f:
        f.write(json.dumps(meta) + "\n")


def _cache_size(model, encoded: Sequence[torch.Tensor], max_new_tokens: int, tree: int, max_len: int | None) -> int:
    """The target's cache: the longest prompt + ``max_new_tokens`` + the largest tree + 8, or ``max_len`` checked
    to hold that (:class:`CacheFullError` otherwise)."""
    limit = getattr(model.config.get_text_config(), "max_position_embeddings", None) or 1 << 30
    longest = max(e.shape[0] for e in encoded)
    needed = longest + max_new_tokens + tree + 8
    if max_len is not None and max_len < needed:
        raise CacheFullError(
            f"the longest prompt ({longest} tokens) + max_new_tokens ({max_new_tokens}) + the largest tree ({tree}) "
            f"+ 8 need a cache of {needed}, more than max_len {max_len}"
        )
    return min(needed, limit) if max_len is None else max_len


#: What a row's build or generation may raise and the bench records as that row's result (skipped or error) while
#: the other rows go on: the library's own refusals (a missing asset, a head that does not fit, NaN logits, a full
#: cache), torch's runtime failures (out of memory, a kernel or compile error) and bad values or files. Anything else
#: (a TypeError, an AttributeError: a bug) stops the run; the rows measured so far stay in results.jsonl.
MEASURED_FAILURES: tuple[type[BaseException], ...] = (SpecdecError, RuntimeError, ValueError, OSError)


@dataclass
class _Run:
    """One invocation's state between its phases: build the rows of a temperature, then measure them prompt by
    prompt (rows in a rotating order), comparing greedy rows with vanilla's tokens as they come."""

    model: Any
    tokenizer: Any
    target: HFTarget
    prompts: Sequence[Prompt]
    encoded: Sequence[torch.Tensor]
    results: ResultsFile
    done: set
    max_new_tokens: int
    seed: int
    top_p: float
    top_k: int
    bar: Any = None
    reference: dict[str, list[int]] = field(default_factory=dict)  # vanilla's greedy tokens per prompt id
    speculate: str | None = None
    # speculate="auto": one pace per method and sampling setting, kept across the prompts (rates differ by setting);
    # the default (None): each generator keeps its own per setting
    paces: dict[tuple, Pace] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.reference = {  # vanilla greedy references already measured (resume)
            r["prompt_id"]: r["tokens"]
            for r in self.results.rows()
            if r.get("status") == "ok"
            and r["method"] == "vanilla"
            and float(r["temperature"]) == 0.0
            and int(r["max_new_tokens"]) == self.max_new_tokens
        }

    def owed(self, prompt: Prompt, variant: Variant, temperature: float) -> bool:
        return (prompt.id, variant.name, float(temperature), self.max_new_tokens) not in self.done

    def sampling(self, temperature: float, seed: int) -> SamplingParams:
        return SamplingParams(temperature=temperature, seed=seed, top_p=self.top_p, top_k=self.top_k)

    def build(self, rows: Sequence[Variant], temperature: float) -> dict[str, Any]:
        """The generators of ``rows`` still owed at ``temperature``, warmed up; a row that cannot be built is
        recorded as skipped (a missing asset) or as an error, and taken off the progress bar's total."""
        base = self.sampling(temperature, self.seed)
        built, built_in = {}, {}
        for v in rows:
            if not any(self.owed(p, v, temperature) for p in self.prompts):
                continue
            try:
                start = time.perf_counter()
                built[v.name] = _build(v, self.model, self.tokenizer, self.target, base)
                built_in[v.name] = time.perf_counter() - start  # a cost-curve probe, where the method sizes trees
            except MEASURED_FAILURES as e:  # a missing asset is expected; the others are reported, not fatal
                status = "skipped" if isinstance(e, MissingAssetError) else "error"
                reason = str(e) if status == "skipped" else f"{type(e).__name__}: {e}"
                self.results.append(status_row(v, temperature, self.max_new_tokens, status, reason))
                self.bar.write(f"{status} {v.name}: {reason}")
                self.bar.total -= sum(self.owed(p, v, temperature) for p in self.prompts)
                self.bar.refresh()  # not run: off the total, so it does not pass for fast work in the rate
        warm_stop = StopCondition(max_new_tokens=WARMUP_TOKENS)
        for name, gen in built.items():  # first-call costs (allocations, kernels, compiles) stay out of timed runs
            graphs, start = compiled_graphs(), time.perf_counter()
            if isinstance(gen, (SpeculativeGenerator, VanillaGenerator)):
                warm_up(gen, base)  # static shapes: every shape compiled now (rows count any left: "compiles")
            gen.generate(self.encoded[0], base, warm_stop)
            took = time.perf_counter() - start
            self.bar.write(  # where a run's minutes go before anything is timed (a GPU check has few of them)
                f"ready {name} T={temperature:g}: built in {built_in[name]:.1f} s, warmed up in {took:.1f} s "
                f"({compiled_graphs() - graphs} graphs compiled)"
            )
        return built

    def measure(self, built: dict[str, Any], order: Sequence[Variant], temperature: float) -> None:
        """Every owed generation at ``temperature``, prompt by prompt, the rows rotated one place per prompt."""
        eos = [self.tokenizer.eos_token_id] if self.tokenizer.eos_token_id is not None else []
        stop = StopCondition(max_new_tokens=self.max_new_tokens, eos_token_ids=eos)
        for i, (prompt, ids) in enumerate(zip(self.prompts, self.encoded, strict=True)):
            sampling = self.sampling(temperature, self.seed + i)
            rotated = [
                v for v in order[i % len(order) :] + order[: i % len(order)] if self.owed(prompt, v, temperature)
            ]
            waiting: list[dict] = []
            for v in rotated:
                row = self._generate(built[v.name], v, prompt, ids, sampling, stop)
                if row is None:
                    continue
                if temperature == 0.0 and v.name == "vanilla":
                    self.reference[prompt.id] = row["tokens"]
                    row["greedy_equal"] = True
                waiting.append(row)
                if temperature == 0.0 and prompt.id not in self.reference:
                    continue  # compared (and written) once vanilla has run for this prompt
                for r in waiting:
                    if temperature == 0.0 and r["method"] != "vanilla":
                        diff = first_difference(self.model, ids, self.reference[prompt.id], r["tokens"])
                        r["greedy_equal"], r["first_diff"] = diff is None, diff
                    self.results.append(r)
                waiting = []
            for r in waiting:  # only if vanilla failed: keep the rows without the comparison
                self.results.append(r)

    def _speculate(self, gen: SpeculativeGenerator, v: Variant, sampling: SamplingParams) -> str | Pace | None:
        """The ``speculate`` of a speculative method's generation: ``"auto"`` one pace per method and sampling
        setting, built at its first generation and kept across the prompts; otherwise the run's value."""
        if self.speculate != "auto":
            return self.speculate
        setting = (v.name, sampling.temperature, sampling.top_p, sampling.top_k)
        if setting not in self.paces:
            self.paces[setting] = gen.auto_pace()
        return self.paces[setting]

    def _generate(self, gen, v: Variant, prompt: Prompt, ids: torch.Tensor, sampling: SamplingParams, stop) -> dict:
        """One timed generation's row, or None after recording its error (a failing method must not lose the
        others' measurements)."""
        self.bar.set_postfix_str(f"{v.name} T={sampling.temperature:g} {prompt.id}")
        graphs = compiled_graphs()
        try:
            extra = {"speculate": self._speculate(gen, v, sampling)} if isinstance(gen, SpeculativeGenerator) else {}
            result = gen.generate(ids, sampling, stop, **extra)
        except MEASURED_FAILURES as e:  # a failing method must not lose the others' measurements
            self.results.append(
                status_row(v, sampling.temperature, self.max_new_tokens, "error", f"{type(e).__name__}: {e}")
            )
            self.bar.write(f"error in {v.name} on {prompt.id}: {type(e).__name__}: {e}")
            self.bar.update(1)
            return None
        self.bar.update(1)
        return {**result_row(v, prompt, ids, sampling, stop, result), "compiles": compiled_graphs() - graphs}
