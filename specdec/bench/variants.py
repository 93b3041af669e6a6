"""The rows of a benchmark run: which methods, at which tree, labelled how (``plan_variants``, ``Variant``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from specdec.method_options import ADAPTIVE_OPTIONS, SAMPLED_OPTIONS
from specdec.methods import METHODS, MethodOptions, method_names, sampled_tree_of
from specdec.sampling import SamplingParams

__all__ = ["HF_METHODS", "Variant", "all_method_names", "max_tree", "plan_variants", "tree_label"]

HF_METHODS = ("hf-generate", "hf-prompt-lookup")


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


def tree_label(variant: Variant, sampling: SamplingParams) -> int | str | None:
    """The row's tree: the variant's (fixed size, ``"adaptive"``, None) or ``"sampled SHAPE"`` where it samples."""
    shape = sampled_tree_of(variant.method, sampling, variant.options)
    if shape is None:
        return variant.tree_size
    ratio = variant.options.draft_temperature_ratio
    gate = " gated" if variant.options.sampled_level_gate else ""
    return f"sampled {shape}{gate}" + ("" if ratio == 1.0 else f" at {ratio:g}T")


def max_tree(variants: Iterable[Variant]) -> int:
    return max(
        [v.options.total_tokens or v.options.max_total_tokens for v in variants if v.tree_size is not None] + [64]
    )
