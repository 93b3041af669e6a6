"""``specdec bench --batch-sizes``: throughput of the prompts decoded several at a time (:mod:`specdec.batched`).

For each temperature, each batch size ``B`` and each method (vanilla first, then the others in an order rotated by
the batch size), every selected prompt runs through ``generate_batch(max_batch=B)`` (``hf-generate``: HF
``model.generate`` on left-padded chunks of ``B``). One JSON line per (method, batch size, temperature) goes to
``out_dir/batch.jsonl`` as soon as it is measured (appended; ``resume=False``, ``--fresh``, starts it afresh), and
``out_dir/batch.md`` gets this run's table.

Row fields: ``method``, ``batch_size``, ``temperature``, ``prompts``, ``new_tokens`` (all rows), ``seconds`` (wall,
prefills included), ``tokens_per_second``, ``vs_vanilla`` (against batched vanilla at the same size and temperature),
``tau`` (mean over rows; null for HF), ``row_seconds`` (mean over rows of a row's time from its prefill to its last
token: its latency in the batch; for HF the chunk's time), ``greedy_equal`` (T = 0: rows whose tokens equal batched
vanilla's, which the one-sequence loop reproduces), ``errors`` (rows that failed alone).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from specdec.batched import BatchRowError
from specdec.bench.baselines import HFGenerate
from specdec.calls import GenerationResult, StopCondition
from specdec.generate import VanillaGenerator
from specdec.methods import build_method
from specdec.sampling import SamplingParams

__all__ = ["run_batched"]


def _generator(name: str, model, target, options, eos: int | None):
    if name == "vanilla":
        return VanillaGenerator(target)
    if name == "hf-generate":
        return HFGenerate(model, eos)
    return build_method(name, target, options)


def _run(gen, encoded: list[torch.Tensor], sampling: SamplingParams, stop: StopCondition, size: int):
    """Every prompt through ``gen`` at ``size`` rows at once: the results (a failed row's ``error`` set), seconds."""
    t0 = time.perf_counter()
    try:
        results = gen.generate_batch(encoded, sampling, stop, max_batch=size)
    except BatchRowError as error:
        results = error.results
    return results, time.perf_counter() - t0


def _row(name: str, size: int, t: float, results: list[GenerationResult], seconds: float, reference, base) -> dict:
    ok = [r for r in results if r.error is None]
    new = sum(len(r.tokens) for r in ok)
    taus = [r.metrics.tau for r in ok] if name != "hf-generate" else []
    return {
        "method": name,
        "batch_size": size,
        "temperature": t,
        "prompts": len(results),
        "new_tokens": new,
        "seconds": seconds,
        "tokens_per_second": new / seconds,
        "vs_vanilla": None if base is None else new / seconds / base,
        "tau": sum(taus) / len(taus) if taus else None,
        "row_seconds": sum(r.metrics.time_total for r in ok) / max(1, len(ok)),
        "greedy_equal": None
        if reference is None
        else sum(r.tokens == v for r, v in zip(results, reference, strict=True)),
        "errors": [f"row {i}: {type(r.error).__name__}: {r.error}" for i, r in enumerate(results) if r.error],
    }


def run_batched(
    config, model, tokenizer, target, encoded: Sequence[torch.Tensor], methods: Sequence[str], out: Path
) -> Path:
    """Measure ``methods`` (vanilla always, first) at each of ``config.batch_sizes`` and temperature; returns
    ``out/batch.jsonl`` (and writes ``out/batch.md``)."""
    names = ["vanilla", *(m for m in methods if m != "vanilla")]
    eos = tokenizer.eos_token_id
    stop = StopCondition(max_new_tokens=config.max_new_tokens, eos_token_ids=sorted({*target.eos_token_ids, eos}))
    gens = {m: _generator(m, model, target, config.options, eos) for m in names}
    prompts = list(encoded)
    for gen in gens.values():  # warm-up: kernels, the budget's cost curve
        gen.generate_batch(prompts[:2], SamplingParams(), StopCondition(max_new_tokens=8), max_batch=2)
    path = out / "batch.jsonl"
    if not config.resume and path.exists():  # not resumable: each row is one batched run of every prompt
        path.unlink()
    rows: list[dict] = []
    for t in config.temperatures:
        sampling = SamplingParams(temperature=t, seed=config.seed, top_p=config.top_p, top_k=config.top_k)
        for i, size in enumerate(config.batch_sizes):
            others = names[1:]
            order = ["vanilla", *others[i % max(1, len(others)) :], *others[: i % max(1, len(others))]]
            reference, base = None, None
            for name in order:
                results, seconds = _run(gens[name], prompts, sampling, stop, size)
                row = _row(name, size, float(t), results, seconds, reference, base)
                if name == "vanilla":
                    reference = [r.tokens for r in results] if sampling.greedy else None
                    base = row["tokens_per_second"]
                rows.append(row)
                with path.open("a") as f:
                    f.write(json.dumps(row) + "\n")
    (out / "batch.md").write_text(batch_table(rows))
    return path


def batch_table(rows: list[dict]) -> str:
    """The markdown table of batched rows: tokens/s, against batched vanilla, τ, row latency, greedy equality."""
    lines = [
        "| T | batch | method | tok/s | x batched vanilla | tau | row s | greedy = vanilla | errors |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        vs = 1.0 if r["vs_vanilla"] is None else r["vs_vanilla"]
        tau = "-" if r["tau"] is None else f"{r['tau']:.2f}"
        equal = "-" if r["greedy_equal"] is None else f"{r['greedy_equal']}/{r['prompts']}"
        lines.append(
            f"| {r['temperature']:g} | {r['batch_size']} | {r['method']} | {r['tokens_per_second']:.1f} | {vs:.2f}x "
            f"| {tau} | {r['row_seconds']:.1f} | {equal} | {len(r['errors'])} |"
        )
    return "\n".join(lines) + "\n"
