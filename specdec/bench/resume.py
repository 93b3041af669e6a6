"""Resuming a results folder: refuse to pool rows measured another way (another tree, filters, backend or dtype)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from specdec.bench.variants import Variant, tree_label
from specdec.errors import SpecdecError
from specdec.sampling import SamplingParams

__all__ = ["ResumeMismatchError", "check_resumed_filters", "check_resumed_target", "check_resumed_trees"]


class ResumeMismatchError(SpecdecError, ValueError):
    """A results folder holds rows of a row label measured with another tree than this run would use."""


def check_resumed_filters(rows: list[dict], temperatures: Sequence[float], top_p: float, top_k: int, out: Path) -> None:
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


def check_resumed_trees(rows: list[dict], variants: Sequence[Variant], out: Path) -> None:
    """Refuse to resume ``out`` where a row of this run's labels was measured with another tree (a sampled tree
    against a dynamic one, after a change of ``--sampled-tree`` or of the default): the report would pool them."""
    by_name = {v.name: v for v in variants}
    for r in rows:
        v = by_name.get(r.get("method"))
        if r.get("status") != "ok" or v is None:
            continue
        want = tree_label(v, SamplingParams(temperature=float(r["temperature"])))
        if r.get("tree_size") != want:
            raise ResumeMismatchError(
                f"{out}: {r['method']} at T={float(r['temperature']):g} was measured with tree {r.get('tree_size')!r} "
                f"and this run would use {want!r}; pass --fresh, or another --out"
            )


def check_resumed_target(out: Path, has_rows: bool, backend: str, dtype: str, speculate: str | None = None) -> None:
    """Refuse to resume ``out`` where its last run measured another target backend or dtype, or paced its methods
    otherwise (``--speculate``; ``runs.jsonl``; runs that predate the fields are not checked): the report would pool
    rows of two different targets or loops."""
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
    if "speculate" in last and last["speculate"] != speculate:
        raise ResumeMismatchError(
            f"{out} holds rows measured with --speculate {last['speculate'] or 'default'}, and this run would use "
            f"{speculate or 'default'}; pass the same --speculate, --fresh, or another --out"
        )
