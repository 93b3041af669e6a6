"""``specdec budget`` and ``specdec doctor``: what this machine's forwards and kernels cost (the measurements the
adaptive tree budget and ``weights="auto"`` decide by)."""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

from specdec.cli_model import add_model_options, load_target_model
from specdec.cli_options import add_backend_options, at_least, target_backend

__all__ = ["add_measuring", "cmd_budget", "cmd_doctor"]


# ----------------------------------------------------------------------------------------------- budget
def cmd_budget(args: argparse.Namespace) -> int:
    import math

    import torch

    from specdec.budget import DEFAULT_SIZES, choose_budget, curve_path, forward_cost_curve, measure_forward_cost
    from specdec.target import HFTarget

    backend = target_backend(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    model, _ = load_target_model(args)
    sizes = sorted(set(args.sizes or DEFAULT_SIZES))
    target = HFTarget(model, max_len=max(sizes) + args.context + 8, **backend, in_place=True)
    if args.refresh or args.sizes or args.repeats is not None:
        curve = measure_forward_cost(target, sizes=sizes, repeats=args.repeats or 5, context=args.context)
    else:
        curve = forward_cost_curve(target, context=args.context)
    meta = curve.meta
    print(
        f"target forward cost, {args.model or 'SmolLM2-135M-Instruct'} on {meta.get('device', '?')} "
        f"({target.execution.label}), {meta.get('threads', '?')} threads, "
        f"{meta.get('context', '?')} tokens of context, median of {meta.get('repeats', '?')} "
        f"(measured {meta.get('date', '?')})"
    )
    print(curve.table())
    print(f"cache: {curve_path(model, target.device)}")
    # What the budget picks for drafts whose depth-n nodes are accepted with probability a^n (a chain-like pool).
    for a in (0.3, 0.6, 0.8, 0.9):
        values, depths = [], []
        for d in range(1, 9):
            for rank in range(4):
                values.append(d * math.log(a) + rank * math.log(0.25))
                depths.append(d)
        b = choose_budget(curve, values, depths=depths, max_total=max(curve.sizes))
        print(
            f"  per-level acceptance {a:.1f}: tree of {b.total_tokens} tokens, depth {b.depth}, "
            f"E[tau] {b.expected_tau:.2f}, ~{b.expected_tokens_per_second:.1f} tok/s (target forwards only)"
        )
    return 0


# ----------------------------------------------------------------------------------------------- doctor
def cmd_doctor(args: argparse.Namespace) -> int:
    """The CPU, and per dtype the kernel table ``weights="auto"`` decides by on it (measured now if not cached)."""
    import torch

    from specdec.backends import resolve
    from specdec.backends.aot import cached_package, package_attention
    from specdec.backends.cpu import cpu_gemm_profile, machine_summary
    from specdec.backends.kernels import packing_pays, plain_linear, shared_copy
    from specdec.backends.measured import (
        KernelTable,
        linear_shape,
        measuring,
        model_table,
        rule_kept,
        stacked_shape,
        table_path,
    )
    from specdec.backends.native import why_not_native
    from specdec.backends.skinny_choice import package_kernels

    if args.threads:
        torch.set_num_threads(args.threads)
    print(machine_summary())
    profile = cpu_gemm_profile()
    kept = rule_kept()
    how = "measurement" if measuring() else f"the rule (profile {profile!r})"
    if kept and not measuring():
        how += f", kept on this CPU until its results row ({kept}) is re-run; SPECDEC_KERNELS=measure measures"
    print(f"weights='auto' decides by {how}")
    why = why_not_native()
    steps = "native (specdec.backends.native)" if why is None else f"tensor form: {why}"
    print(f"sampling's per-cycle steps (T > 0): {steps}")
    for name in args.dtypes:
        args.dtype = name
        model, _ = load_target_model(args)
        weights, _, why = resolve(model, "auto", static_shapes=False)
        print(f"\n{name}: ms per call, weights cold ({table_path(getattr(torch, name))})")
        if weights != "packed":
            print(f"  auto runs it stock: {why}")
        table, groups = model_table(model, refresh=args.refresh)
        rule = {
            KernelTable.name(linear_shape(m)): "packed" if weights == "packed" and packing_pays(m, profile) else "stock"
            for m in model.modules()
            if plain_linear(m)
        }
        print("\n".join("  " + line for line in table.rows(rule)))
        for group, wins in {stacked_shape(g): (g, w) for g, w in groups}.values():  # one line per distinct shape
            members = "+".join(KernelTable.name(linear_shape(m)) for m in group)
            print(f"  group {members}: {'packed and stacked' if wins else 'each member by its own row'}")
        if name == "float32":
            _print_skinny_tables(model, args.refresh)
            _print_attention(model)
        _print_row_padding(model, args.refresh)
        variant = shared_copy(model)  # with the package's measured kernels, where that package is cached
        package_kernels(variant, cached_only=True)
        package = cached_package(variant)
        attention = ", its attention on the few-row kernel" if package and package_attention(variant) else ""
        print(
            f"  static_shapes='auto' on a CPU: {'the ahead-of-time package ' + str(package) if package else 'eager'}"
            + (attention if package else " (no package of this model here: --static-shapes aot builds one, minutes)")
        )
        del model
    _print_packages()
    return 0


def _print_skinny_tables(model, refresh: bool) -> None:
    """The skinny kernel's two tables for float32 ``model`` under ``weights="auto"``
    (:mod:`specdec.backends.skinny_choice`): on eager shapes (a linear on the kernel, or a packed linear's single row)
    and in an ahead-of-time package."""
    import torch

    from specdec.backends.kernel_times import EAGER_ROWS, kernel_table, table_path
    from specdec.backends.measured import model_shapes
    from specdec.backends.skinny import unavailable
    from specdec.backends.skinny_choice import skinny_measures, table_kernels

    why = "the rule: stock (not measured on this CPU)" if not skinny_measures() else unavailable()
    if why:
        print(f"  the skinny kernel (eager linears, single rows, the ahead-of-time package's linears): {why}")
        return
    linears, _, shapes = model_shapes(model)
    eager_kernels, package_kernels, about = table_kernels(linears)
    print(f"  {about} (the skinny kernel's coded form streams them: SPECDEC_CODES=off leaves it out)")
    eager = kernel_table(shapes, torch.float32, refresh=refresh, kernels=eager_kernels, rows=EAGER_ROWS)
    path = table_path(torch.float32, eager_kernels, EAGER_ROWS)
    print(f"  eager shapes with the skinny kernel (a linear on it, or a packed linear's single row) ({path}):")
    print("\n".join("  " + line for line in eager.rows()))
    table = kernel_table(shapes[: len(linears)], torch.float32, refresh=refresh, kernels=package_kernels)
    path = table_path(torch.float32, package_kernels)
    print(f"  its ahead-of-time package (static_shapes='aot'), ms per call, weights cold ({path}):")
    print("\n".join("  " + line for line in table.rows()))


def _print_attention(model) -> None:
    """The few-row attention's measurement for float32 ``model`` (:mod:`specdec.backends.attention_choice`)."""
    from specdec.backends.attention_choice import attention_mode, attention_times

    mode = attention_mode()
    _, why, times = attention_times(model)
    if times is None:
        why = why or "not measured: switched off, a kept CPU, or a model the kernel does not serve"
        print(f"  attention: SDPA unless asked otherwise ({why})")
    else:
        rows = ", ".join(f"{name} {' / '.join(f'{us:.0f}' for us in v.values())}" for name, v in times.items())
        print(f"  attention, us per call for 1 / 8 rows ({rows}): {why}")
    print(f"  SPECDEC_ATTENTION={mode} (auto: as measured; sdpa; few-row); invariant=True on float32 takes the kernel")


def _print_row_padding(model, refresh: bool) -> None:
    """The packed linears' row padding for ``model`` as ``weights="auto"`` prepares it
    (:mod:`specdec.backends.row_padding`)."""
    from specdec.backends.choice import prepare_model
    from specdec.backends.row_padding import chosen_rows, padding_times, row_padding_mode, wins, wins_needed

    mode = row_padding_mode()
    prepared, execution = prepare_model(model, "auto", False, in_place=False)
    passes = padding_times(prepared, refresh=refresh) if mode == "auto" else None
    now = f"fewer rows padded to {execution.pad_rows} (SPECDEC_ROW_PADDING={mode}: auto, off or a row count)"
    if passes is None:
        print(f"  row padding: {now}; nothing measured (no packed linears that may pad, or they fit the caches)")
        return
    n, won = len(passes[1]), wins(passes)
    steps = ", ".join(
        f"{k}: {statistics.median(v) * 1e3:.1f}" + (f" ({won[k]}/{n})" if k in won else "")
        for k, v in sorted(passes.items())
    )
    print(
        f"  row padding, the 1-token step's median ms with every packed linear padded to k rows (passes faster than "
        f"unpadded; {wins_needed(n)} of {n} needed): {steps}; the times choose {chosen_rows(passes)}; prepared: {now}"
    )


def _print_packages() -> None:
    """The ahead-of-time packages cached on this machine (:func:`specdec.backends.aot.packages`)."""
    from specdec.backends.aot import packages
    from specdec.backends.package_verdict import verdict_path, verdict_text

    found = packages()
    total = sum(p["bytes"] for p in found) / 2**30
    print(f"\nahead-of-time packages: {len(found)}, {total:.2f} GiB (delete a file to free its space)")
    for p in found:
        built = f"built in {p.get('built_seconds', '?')} s on {p.get('cpu', '?')}"
        what = f"{p.get('model', '?')} {p.get('dtype', '')}, {built}"
        mine = "this machine" if p["this_machine"] else "another machine, torch or thread count: never used here"
        print(f"  {p['path']}: {p['bytes'] / 2**30:.2f} GiB, {what}; {mine}")
    path = verdict_path()
    for name, verdict in (json.loads(path.read_text()) if path.exists() else {}).items():
        print(f"  {name}'s kernels: {verdict_text(verdict)} (delete {path} to measure again)")


def add_measuring(sub: Any) -> None:
    """``budget`` and ``doctor``: what this machine's forwards and kernels cost."""
    u = sub.add_parser("budget", help="measure the target's forward cost vs tree size (the adaptive tree budget)")
    u.add_argument("--refresh", action="store_true", help="measure again instead of reading the cache")
    u.add_argument("--sizes", nargs="+", type=at_least(1), default=None, help="tree sizes to time")
    u.add_argument("--repeats", type=at_least(1), default=None, help="timed forwards per size (default 5)")
    u.add_argument("--context", type=at_least(0), default=256, help="tokens of context before the tree (default 256)")
    u.add_argument("--threads", type=at_least(1), default=None, help="torch CPU threads")
    add_backend_options(u, drafts=False)
    add_model_options(u, head=False)
    u.set_defaults(func=cmd_budget)

    d = sub.add_parser("doctor", help="the CPU, and the kernel choice weights='auto' makes on it, measured per shape")
    d.add_argument("--dtypes", nargs="+", choices=("float32", "bfloat16"), default=["float32", "bfloat16"])
    d.add_argument("--refresh", action="store_true", help="measure again instead of reading the cache")
    d.add_argument("--threads", type=at_least(1), default=None, help="torch CPU threads")
    add_model_options(d, head=False, device=False)
    d.set_defaults(func=cmd_doctor)
