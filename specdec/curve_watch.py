"""Is a cached forward-cost curve still this machine's? Checked against the tree forwards the decoding loop times.

A cost curve (:mod:`specdec.budget`) is measured once per model, device, thread count and backend, then read back by
every later process. A probe that ran while the machine was busy in a way that passes its own checks (slow evenly,
or at the sizes the loop never uses) would size every adaptive tree of that machine from wrong prices for ever: on
a Zen 3 a stale curve said a tree of 8 tokens cost 1.11x a 1-token forward while the loop paid 1.40x
(``docs/results/2026-11-28-house-zen3``). So the loop reports each tree forward it times, and a :class:`CurveWatch`
compares them with the curve:

* after :data:`WARMUP` forwards, each forward of ``m`` tokens that took ``t`` seconds gives the ratio
  ``t / cost(m)``, kept in the bucket of the curve's first measured size ``>= m`` (trees of 5-8 tokens in the bucket
  of 8);
* every :data:`CHECK_EVERY` forwards, a bucket holding at least :data:`MIN_SAMPLES` ratios whose median (of the
  latest :data:`WINDOW`) lies more than :data:`TOLERANCE` from 1 is a disagreement;
* a curve read back from the cache that disagrees is marked ``stale`` in its file, with one warning naming the
  bucket, and :func:`specdec.budget.forward_cost_curve` measures it again at its next use (the policies of the
  running call keep the curve they hold: their trees change at the next build, never inside a call);
* a forward whose committed context is more than :data:`CONTEXT_BAND` times the probe's (``meta["context"]``) is not
  judged: a step's cost grows with its context (on an ahead-of-time package with the cache's capacity, which the
  runner sizes to each prompt plus 256 slots and doubles as it fills, ``ModelRunner._fit``), so a long prompt's
  forwards are no evidence against a curve measured at 256 tokens, and measuring it again at 256 would not change it
  (Spec-Bench's summaries and RAG prompts, ~1,000 tokens, flagged the package's curve stale at 1.25-1.35x in every
  run: ``docs/results/2026-12-01-pace-amd-f25m17``); their trees are still priced at the probe's context;
* a curve measured in this process that disagrees is not measured again (the probe and the loop then differ for a
  reason of their own, e.g. a much longer context, or a noisy machine): the watch keeps its ``verdict``, the cache
  is left alone, and nothing is printed.

Only synchronous devices (a CPU) are watched: on CUDA the loop's clock around a forward times its launch, not its
work. A batch row's share of a curve (:meth:`~specdec.budget.CostCurve.per_row`) is not watched either.
"""

from __future__ import annotations

import bisect
import json
import math
import statistics
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specdec.budget import CostCurve

__all__ = [
    "CHECK_EVERY",
    "CONTEXT_BAND",
    "MIN_SAMPLES",
    "TOLERANCE",
    "WARMUP",
    "WINDOW",
    "CurveWatch",
    "watch_curve",
    "watch_of",
]

#: A bucket's median ratio of loop time to the curve's cost beyond ``1 +- TOLERANCE`` (in log scale) disagrees.
TOLERANCE = 0.15
#: Ratios a bucket needs before it is judged, the latest ones kept, and how often the buckets are judged.
MIN_SAMPLES, WINDOW, CHECK_EVERY = 12, 64, 16
#: Forwards at a committed context beyond this multiple of the probe's are not judged (see the module docstring).
CONTEXT_BAND = 2.0
#: Forwards not counted at first: a process's first method ran ~10 % slower over its first cycles (Zen 3, measured
#: by ``benchmarks/curve_check.py``: the same curve at 1.11-1.15x run first, 1.02-1.08x run second).
WARMUP = 8


class CurveWatch:
    """Compares the tree forwards a decoding loop times with the curve its policies were sized from.

    Args:
        curve: the curve the policies hold. path: its cache file.
        fresh: measured in this process (then a disagreement is only reported, see the module docstring).
    """

    def __init__(self, curve: CostCurve, path: Path, fresh: bool) -> None:
        self.curve, self.path, self.fresh = curve, path, fresh
        self.ratios: dict[int, list[float]] = {}  # bucket (index into curve.sizes) -> t / cost(m), oldest first
        self.count = self.seen = 0  # forwards judged, forwards reported
        self.verdict: str | None = None  # the disagreement, once found (then recording stops)

    def record(self, tokens: int, seconds: float, context: int | None = None) -> None:
        """One tree forward of ``tokens`` tokens that took ``seconds`` (wall clock, synchronous device) after
        ``context`` committed tokens (None: not known, judged)."""
        self.seen += 1
        if self.verdict is not None or self.seen <= WARMUP or not (seconds > 0 and math.isfinite(seconds)):
            return
        probed = self.curve.meta.get("context")
        if context is not None and isinstance(probed, int) and context > CONTEXT_BAND * probed:
            return
        sizes = self.curve.sizes
        bucket = min(bisect.bisect_left(sizes, tokens), len(sizes) - 1)
        kept = self.ratios.setdefault(bucket, [])
        kept.append(seconds / self.curve.cost(tokens))
        del kept[:-WINDOW]
        self.count += 1
        if self.count % CHECK_EVERY == 0:
            self.verdict = self.disagreement()
            if self.verdict is not None:
                self._report()

    def disagreement(self) -> str | None:
        """The first bucket whose loop times disagree with the curve, in words; None if every judged bucket agrees."""
        sizes = self.curve.sizes
        for bucket, kept in sorted(self.ratios.items()):
            if len(kept) < MIN_SAMPLES:
                continue
            ratio = statistics.median(kept)
            if abs(math.log(ratio)) > math.log1p(TOLERANCE):
                low = sizes[bucket - 1] + 1 if bucket else 1
                span = f"{sizes[bucket]}" if low >= sizes[bucket] else f"{low}-{sizes[bucket]}"
                return (
                    f"tree forwards of {span} tokens took {ratio:.2f}x the cached curve's time "
                    f"(median of the latest {len(kept)} in the decoding loop; tolerance {TOLERANCE:.0%})"
                )
        return None

    def _report(self) -> None:
        if self.fresh:  # kept: nothing to act on (watch.verdict says it; benchmarks/curve_check.py prints it)
            return
        try:
            data = json.loads(self.path.read_text())
            data.setdefault("meta", {})["stale"] = self.verdict
            tmp = self.path.with_suffix(".stale.tmp")
            tmp.write_text(json.dumps(data, indent=2))
            tmp.replace(self.path)
        except (OSError, ValueError) as exc:  # a cache we cannot rewrite: say so, decode on
            warnings.warn(f"could not mark the stale forward-cost curve {self.path}: {exc}", stacklevel=3)
        warnings.warn(
            f"the cached forward-cost curve is stale: {self.verdict}; it is measured again when next used "
            f"({self.path.name})",
            stacklevel=3,
        )


#: The watch of the latest curve of each cache file (one per model, device, threads and backend: bounded however many
#: generators a process builds).
_WATCHES: dict[Path, CurveWatch] = {}


def watch_curve(curve: CostCurve, path: Path, fresh: bool) -> CostCurve:
    """Register ``curve`` (read from or written to ``path``) for watching, if its device is synchronous; returns it,
    or the watched curve of the same file and times (so the policies of several generators share one watch)."""
    if curve.meta.get("device") != "cpu" or "rows" in curve.meta:
        return curve
    known = _WATCHES.get(path)
    if known is not None and not fresh and known.curve == curve:
        return known.curve
    _WATCHES[path] = CurveWatch(curve, path, fresh)
    return curve


def watch_of(curves: list[CostCurve]) -> CurveWatch | None:
    """The watch of the first watched curve among ``curves`` (a policy's: :func:`specdec.budget.curves_in`); a curve
    that a later read of its file replaced is no longer watched."""
    for curve in curves:
        for watch in _WATCHES.values():
            if watch.curve is curve:
                return watch
    return None
