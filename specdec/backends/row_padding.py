"""How many rows a packed linear runs at least: a few rows padded with zero rows to the count measured fastest on the
CPU at hand (``SPECDEC_ROW_PADDING=auto``, the default), or as asked (``off``, a number).

Why: oneDNN's packed GEMM does not run a few rows in proportion to their number. On the AMD Zen 4 (family 25 model
17, 2026-11-30, ``docs/results/2026-11-30-row-padding-amd-f25m17``) SmolLM2's whole tree forward cost 1.10x a 1-token
step for 2 rows, 0.93-0.98x for 3 to 6 rows and 1.01x for 7 or 8; with every packed linear's single row padded to 5
or 6 rows the 1-token step ran in 0.91-0.94x its time, and plain decoding ran 1.08x as fast on MT-bench (the same
tokens) and 1.06x on Spec-Bench, EAGLE-3 and the composite as before. The padded rows are zeros and their outputs
are dropped: a real row's values are what the GEMM gives it among 6 rows, as in a tree forward of 6 nodes.

Why the whole model is timed, not each shape: padding single rows to two where a shape alone ran two rows faster made
the AMD Zen 3's whole step 1.09x slower (:data:`~specdec.backends.kernel_times.ROWS`); what a shape does alone did not
carry over. :func:`padding_times` times the model's own 1-token forward (no cache) with every packed linear padding to
``k`` rows, ``k = 1 .. MAX_ROWS``, interleaved pass by pass; :func:`chosen_rows` takes the ``k`` with the shortest
median time where it beats the unpadded step by more than :data:`MARGIN` *and* ran faster than it in the same pass
often enough that one count no faster than it would do so with probability at most :data:`ALPHA` (a one-sided sign
test: 9 of 11 passes; seven counts are tested, and the margin on the median filters them first, so the chance that
some count passes by luck is above ``ALPHA`` but each needs both tests). A busy machine slows
every count of a pass alike, so the paired count holds where a median alone can be moved by a few slow passes; a
measurement whose medians say "pad" but whose passes do not agree runs once more and the passes are pooled
(:data:`ATTEMPTS`), else nothing pads. Every row count below ``k`` then pads to ``k`` (a tree of 2-5 nodes, a batch
of a few rows: on the Zen 4 each ran at or below its unpadded time).

Where: ``weights="auto"`` on eager shapes, without row-invariant numerics (their single rows pad to two,
:mod:`~specdec.backends.row_probe`), on packed linears whose single row runs packed (not on a measured single-row
kernel, :func:`~specdec.backends.measured.single_rows`), for models whose packed weights exceed
:data:`~specdec.backends.kernel_times.COLD_BYTES` (a smaller model's weights stay in the caches; nothing is measured
and nothing padded). ``SPECDEC_KERNELS=rule`` pads nothing; a CPU that keeps the vendor rule for its linears
(:data:`~specdec.backends.kernel_times.RULE_KEPT`) still measures its padding, as its attention (padding keeps no
memory), and so does a forced ``SPECDEC_CPU_GEMM`` profile (the packing it forces is what pads). Cached per machine
(:func:`~specdec.backends.kernel_times.machine_key`) and the model's packed shapes, beside the linears' tables;
``specdec doctor`` prints it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import statistics
import time

import torch
from torch import nn

from specdec.backends.kernel_times import COLD_BYTES, table_path
from specdec.backends.kernels import PackedLinear, packed_linear, runs_packed

__all__ = [
    "ALPHA",
    "ATTEMPTS",
    "MARGIN",
    "MAX_ROWS",
    "chosen_rows",
    "packed_linears",
    "pad_label",
    "padding_rows",
    "padding_times",
    "row_padding_mode",
    "set_pad_rows",
    "wins",
    "wins_needed",
]

#: Row counts tried: a single row padded to each of ``1 .. MAX_ROWS``.
MAX_ROWS = 8
#: Interleaved timing passes of one call per row count (the first one warms up and is dropped).
PASSES = 11
#: Relative gain of the median over the unpadded step's below which padding is not chosen (noise on these machines).
MARGIN = 0.03
#: False-positive rate of the sign test a padded count must also pass: under "padding changes nothing" each pass is
#: a coin flip, and the count wins in at least :func:`wins_needed` passes with probability at most ``ALPHA``.
ALPHA = 0.05
#: Measurements pooled at most when the medians and the passes disagree (the second runs only then).
ATTEMPTS = 2
#: The candidates' name in the cached table's key (its file sits beside the linears' tables). "passes": the table
#: holds every pass (since 2026-11-30's sign test); the medians-only table of before stays in its own file, so an
#: older checkout sharing the cache still reads its own.
CANDIDATES = ("row-padding", "passes")


def row_padding_mode() -> str | int:
    """``SPECDEC_ROW_PADDING``: ``"auto"`` (default: measured here), ``"off"``, or a row count ``1 .. MAX_ROWS``."""
    mode = os.environ.get("SPECDEC_ROW_PADDING", "auto")
    if mode in ("auto", "off"):
        return mode
    if mode.isdigit() and 1 <= int(mode) <= MAX_ROWS:
        return int(mode)
    raise ValueError(f"SPECDEC_ROW_PADDING must be 'auto', 'off' or a row count 1..{MAX_ROWS}, got {mode!r}")


def packed_linears(model: nn.Module) -> list[PackedLinear]:
    """``model``'s packed linears, a stacked group's once."""
    return list({id(lin): lin for lin in (packed_linear(m) for m in model.modules() if runs_packed(m))}.values())


def _padded(model: nn.Module) -> list[PackedLinear]:
    """``model``'s packed linears that may pad: their single row runs packed, without row-invariant padding."""
    return [lin for lin in packed_linears(model) if lin.single_row_kernel is None and not lin.pad_single_row]


def set_pad_rows(model: nn.Module, rows: int) -> int:
    """Pad every eligible packed linear of ``model`` (:func:`_padded`) to ``rows`` rows, the others to none (1);
    returns how many pad."""
    eligible = {id(lin) for lin in _padded(model)}
    for lin in packed_linears(model):
        lin.pad_rows = rows if id(lin) in eligible else 1
    return len(eligible) if rows > 1 else 0


def pad_label(model: nn.Module) -> str:
    """``"+pad6"`` where ``model``'s packed linears pad fewer rows to 6, else ``""`` (a cost curve's name carries
    it)."""
    rows = max((lin.pad_rows for lin in packed_linears(model)), default=1)
    return f"+pad{rows}" if rows > 1 else ""


def wins_needed(passes: int) -> int:
    """The fewest passes out of ``passes`` a padded count must win against the unpadded step so that a count no
    faster than it (each pass a fair coin) does so with probability at most :data:`ALPHA` (9 of 11, 16 of 22)."""
    tail = 0.0
    for wins in range(passes, -1, -1):
        tail += math.comb(passes, wins) / 2**passes
        if tail > ALPHA:
            return wins + 1
    return 0


def wins(passes: dict[int, list[float]]) -> dict[int, int]:
    """Per padded count ``k > 1``, the passes in which it ran faster than the unpadded step (pass ``i`` of each)."""
    return {k: sum(a < b for a, b in zip(v, passes[1], strict=True)) for k, v in passes.items() if k > 1}


def _verdict(passes: dict[int, list[float]]) -> tuple[int, bool]:
    """``(rows, agreed)`` from per-pass seconds ``{k: [s_1 .. s_n]}`` (pass ``i`` of every ``k`` timed together): the
    fastest median beyond :data:`MARGIN` that also wins its sign test; ``agreed`` is False where the fastest median
    beyond the margin does not win it (the passes disagree with the medians: measure again)."""
    median = {k: statistics.median(v) for k, v in passes.items()}
    beyond = [k for k in sorted(passes) if k > 1 and median[k] < (1 - MARGIN) * median[1]]
    won = wins(passes)
    paired = [k for k in beyond if won[k] >= wins_needed(len(passes[1]))]
    if not paired:
        return 1, not beyond
    best = min(paired, key=lambda k: median[k])  # sorted: ties to fewer rows
    return best, best == min(beyond, key=lambda k: median[k])


def chosen_rows(passes: dict[int, list[float]]) -> int:
    """The row count to pad to from per-pass seconds of the padded 1-token step ``{rows: [s_1 .. s_n]}`` (``1``: the
    unpadded step; pass ``i`` of every count interleaved): the fastest median that beats the unpadded median by more
    than :data:`MARGIN` and beats the unpadded step in at least :func:`wins_needed` of the passes; else 1. Ties go to
    fewer rows."""
    return _verdict(passes)[0]


def padding_rows(model: nn.Module) -> int:
    """The row count ``model``'s packed linears pad to here (module docstring; 1: none). A model whose linears already
    pad (prepared again in place: :meth:`~specdec.target.HFTarget.sibling`, a small-LM drafter sharing the target's
    layers) keeps their count, so preparing a second holder never changes the first's."""
    mode = row_padding_mode()
    if mode == "off" or not _padded(model):
        return 1
    if isinstance(mode, int):
        return mode
    if os.environ.get("SPECDEC_KERNELS") == "rule":
        return 1
    kept = max(lin.pad_rows for lin in _padded(model))
    if kept > 1:  # prepared again (a sibling adapter, a drafter sharing the target's linears): as it was prepared
        return kept
    passes = padding_times(model)
    return 1 if passes is None else chosen_rows(passes)


def padding_times(model: nn.Module, refresh: bool = False) -> dict[int, list[float]] | None:
    """Seconds of ``model``'s 1-token forward with every eligible packed linear padding to ``k`` rows, pass by pass
    (``{k: [s_1 .. s_n]}``, ``k`` in ``1 .. MAX_ROWS``; measured once per machine and packed shapes, cached, a second
    measurement pooled where the first's medians and passes disagree); None for a model whose packed weights fit the
    caches (nothing measured)."""
    linears = _padded(model)
    weight_bytes = sum(lin.in_features * lin.out_features * lin.dtype.itemsize for lin in linears)
    if not linears or weight_bytes < COLD_BYTES:
        return None
    dtype = linears[0].dtype
    shapes = sorted((lin.in_features, lin.out_features, lin.bias is not None) for lin in linears)
    entry = hashlib.sha256(json.dumps(shapes).encode()).hexdigest()[:16]
    path = table_path(dtype, CANDIDATES)
    table = json.loads(path.read_text()) if path.exists() else {}
    if refresh or entry not in table:
        passes = _measure(model, linears)
        for _attempt in range(1, ATTEMPTS):
            if _verdict(passes)[1]:
                break
            more = _measure(model, linears)
            passes = {k: v + more[k] for k, v in passes.items()}
        table = json.loads(path.read_text()) if path.exists() else {}  # read again: another process may have written
        table[entry] = {"passes": {str(k): v for k, v in passes.items()}}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")  # another process may read the table meanwhile
        tmp.write_text(json.dumps(table, indent=1, sort_keys=True))
        tmp.replace(path)
    return {int(k): [float(t) for t in v] for k, v in table[entry]["passes"].items()}


def _measure(model: nn.Module, linears: list[PackedLinear]) -> dict[int, list[float]]:
    """Seconds of the 1-token forward per padded row count and pass (:data:`PASSES`, after one dropped), the counts
    interleaved pass by pass (the order reversed every other pass)."""
    device = next(model.parameters()).device
    ids = torch.zeros(1, 1, dtype=torch.long, device=device)
    counts = list(range(1, MAX_ROWS + 1))
    passes: dict[int, list[float]] = {k: [] for k in counts}
    before = [lin.pad_rows for lin in linears]
    try:
        with torch.inference_mode():
            for index in range(PASSES + 1):
                for k in counts if index % 2 else counts[::-1]:
                    for lin in linears:
                        lin.pad_rows = k
                    start = time.perf_counter()
                    model(input_ids=ids, use_cache=False)
                    if index:
                        passes[k].append(time.perf_counter() - start)
    finally:
        for lin, rows in zip(linears, before, strict=True):
            lin.pad_rows = rows
    return passes
