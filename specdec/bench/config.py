"""What one ``specdec bench`` run measures, validated once: :class:`BenchConfig`.

:func:`~specdec.bench.runner.run_bench` takes one of these (the command line builds it from its flags); a value out of
range, a misspelt field or an unknown method is refused when the config is made, before a model loads.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from specdec.assets import Prompt
from specdec.bench.plan import DEFAULT_TEMPERATURES
from specdec.bench.variants import all_method_names
from specdec.method_options import MethodOptions

__all__ = ["BenchConfig"]


class BenchConfig(BaseModel):
    """One benchmark run: which methods, on which prompts, at which settings, written where.

    Attributes:
        methods: named methods (:func:`specdec.methods.method_names`) and/or ``hf-generate``,
            ``hf-prompt-lookup``; None: :func:`~specdec.bench.plan.default_methods` (the best method, vanilla and
            HF ``generate``). Vanilla is always measured.
        dataset: ``mtbench``, ``humaneval``, ``spec-bench``, a jsonl path, or :class:`~specdec.assets.Prompt` s.
        temperatures: 0 is greedy (with the token-for-token check against vanilla); a temperature given twice runs
            once. Default: T = 0 only.
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
        options: tree and drafter settings of the named methods (default :class:`MethodOptions`).
        weights, static_shapes, invariant: the backend choices of our target (:mod:`specdec.backends`). Our target
            runs a transformed copy; the HF baselines run the model as passed (stock), as a user of ``generate``
            would: the fast path is ours to be measured against it.
        deferred_rows: also run each adaptive method with the deferred tree budget (rows ``M+deferred``).
        dynamic_rows: also run each method that samples its tree at T > 0 with its dynamic tree (rows
            ``M+dynamic``, at T > 0 only).
        top_p, top_k: the sampling filters of every method at T > 0 (HF ``generate`` gets the same ones); recorded
            in each row, and a folder measured with other filters is refused rather than pooled.
        max_len: the target's cache (default: the longest prompt + ``max_new_tokens`` + the largest tree).
        batch_sizes: measure the prompts decoded several at a time instead, at each of these batch sizes
            (:mod:`specdec.bench.batched`: throughput against batched vanilla and HF ``generate``; tree sweeps and
            the deferred/dynamic rows do not apply). Default: none (one prompt at a time).
        speculate: ``"always"``: every cycle of a speculative method speculates; ``"auto"``: each method keeps one
            :class:`~specdec.pace.Pace` across the run's prompts (each cycle speculation or a plain step, whichever
            has emitted more tokens per second so far); None (default): what ``generate`` does by default, a pace
            where the target's forwards are steep, else always (:func:`~specdec.pace.call_pace`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    methods: tuple[str, ...] | None = None
    dataset: str | tuple[Prompt, ...] = "mtbench"
    temperatures: tuple[float, ...] = DEFAULT_TEMPERATURES
    max_new_tokens: int = Field(128, ge=1)
    limit: int | None = Field(None, ge=1)
    out_dir: Path = Path("bench")
    resume: bool = True
    threads: int | None = Field(None, ge=1)
    tree_sizes: tuple[int, ...] = ()
    sweep_method: str | None = None
    seed: int = 0
    command: str | None = None
    options: MethodOptions | None = None
    weights: str = "auto"
    static_shapes: bool | str = "auto"
    invariant: bool | str = "auto"
    deferred_rows: bool = False
    dynamic_rows: bool = False
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0)
    max_len: int | None = Field(None, ge=2)
    batch_sizes: tuple[int, ...] = ()
    speculate: Literal["always", "auto"] | None = None

    @field_validator("batch_sizes")
    @classmethod
    def _batch_sizes(cls, sizes: tuple[int, ...]) -> tuple[int, ...]:
        if any(b < 1 for b in sizes):
            raise ValueError(f"batch sizes must be >= 1, got {sizes}")
        return tuple(dict.fromkeys(sizes))

    @field_validator("methods")
    @classmethod
    def _known_methods(cls, methods: tuple[str, ...] | None) -> tuple[str, ...] | None:
        known = all_method_names()
        unknown = [m for m in methods or () if m not in known]
        if unknown:
            raise ValueError(f"unknown methods {unknown}; known: {', '.join(known)}")
        return methods

    @field_validator("temperatures")
    @classmethod
    def _temperatures(cls, temperatures: tuple[float, ...]) -> tuple[float, ...]:
        bad = [t for t in temperatures if not (math.isfinite(t) and t >= 0)]
        if bad or not temperatures:
            raise ValueError(f"temperatures must be one or more finite numbers >= 0, got {list(temperatures)}")
        return tuple(dict.fromkeys(float(t) for t in temperatures))  # a temperature given twice runs once

    @field_validator("tree_sizes")
    @classmethod
    def _tree_sizes(cls, sizes: tuple[int, ...]) -> tuple[int, ...]:
        if any(m < 2 for m in sizes):
            raise ValueError(f"tree sizes count the root and must be at least 2, got {list(sizes)}")
        return sizes

    @field_validator("static_shapes", "invariant")
    @classmethod
    def _auto_or_bool(cls, value: bool | str, info: ValidationInfo) -> bool | str:
        named = ("auto", "aot") if info.field_name == "static_shapes" else ("auto",)
        if value not in named and not isinstance(value, bool):
            raise ValueError(f"must be {', '.join(repr(n) for n in named)}, True or False, got {value!r}")
        return value

    @property
    def dataset_name(self) -> str:
        """The dataset as recorded in ``runs.jsonl`` (``custom`` for prompts given as objects)."""
        return self.dataset if isinstance(self.dataset, str) else "custom"
