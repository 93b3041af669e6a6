"""Kernel timings on the CPU at hand: each linear shape timed on every candidate kernel, cached per machine.

How a shape is timed (:func:`time_shape`): in a decoding step every weight comes from memory, not from cache, so each
candidate runs over enough copies of a weight of that shape to exceed :data:`COLD_BYTES`, one call per copy, for
1 row (a 1-token step) and 8 rows (a draft tree), and for the skinny kernel's eager table also 16 rows
(:data:`EAGER_ROWS`); the candidates and row counts are interleaved pass by pass and a call's time is the median pass
divided by the copies. The choice minimises the sum over the row counts as the kernel would run (packed's single row
on the kernel that runs one row fastest, :meth:`KernelTable.cost`): a speculative cycle runs one tree forward and
vanilla decoding one 1-row step, and both should gain. A difference under :data:`TIE` is noise
on these machines and keeps the rule's choice. Projections that read one input (``q/k/v``, ``gate/up``) run as one
stacked GEMM once all are packed (:mod:`specdec.backends.stacking`), so a group is also timed stacked: where the
stacked packed GEMM beats its members run stock, the whole group is packed (on AMD Zen 3 a lone 576 -> 192 ``k``
projection runs faster stock, its stacked ``q/k/v`` faster packed).

Cached as JSON under ``cache_dir()/kernels/``, keyed by everything that decides a kernel's speed: the CPU's model name,
family, model and flags, the torch version, the thread count and the dtype, and the candidates and row counts where
they are not the default ones (:func:`machine_key`); another CPU or torch never reuses a table. Measuring a SmolLM2
model's shapes takes a few seconds, once.

Switches: ``SPECDEC_KERNELS=rule`` (or a forced ``SPECDEC_CPU_GEMM`` profile) skips measuring and applies the rule;
``SPECDEC_KERNELS=measure`` measures on every CPU; unset, it measures except on the CPUs whose results rows were
measured under the rule (:data:`RULE_KEPT`: Zen 4, Zen 5), which keep it until their rows are re-run (the Xeon of family
6 model 207 re-ran its row on 2026-12-01: the measured choice won in both dtypes, so it measures). A
measurement that fails or looks broken (a kernel raising, a time of zero, passes spread over more than :data:`NOISY`
of their median) falls back to the rule for that shape with one :class:`~specdec.backends.kernels.FastPathWarning`
naming it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import statistics
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from specdec.backends.cpu import cpu_flags, cpu_info, cpu_key, packing_error
from specdec.backends.kernels import FastPathWarning, Int8Linear, PackedLinear
from specdec.backends.skinny import SkinnyLinear, W8Linear
from specdec.backends.skinny_amx import AMX_KERNELS, amx_synthetic
from specdec.backends.skinny_codes import QBLOCK, Codes

__all__ = [
    "ATTEMPTS",
    "COLD_BYTES",
    "KERNELS",
    "KernelTable",
    "PACKAGE_KERNELS",
    "ROWS",
    "RULE_KEPT",
    "TIE",
    "kernel_table",
    "linear_shape",
    "machine_key",
    "measuring",
    "rule_kept",
    "sides",
    "stacked_shape",
    "table_path",
    "time_shape",
]

KERNELS = ("stock", "packed")
#: The candidates for a model its ahead-of-time package serves (:mod:`specdec.backends.skinny_choice`): inductor
#: packs plain weights itself there, so a linear runs stock (timed as ``F.linear``) or on the skinny kernel
#: (:class:`~specdec.backends.skinny.SkinnyLinear`). Their tables are cached apart (the kernels are in the key).
PACKAGE_KERNELS = ("stock", "skinny")
#: The candidates on eager shapes where the skinny kernel may run
#: (:func:`~specdec.backends.skinny_choice.eager_kernels`), timed at :data:`EAGER_ROWS`, and for a packed linear's
#: single row (:meth:`KernelTable.single_row_kernel`).
EAGER_KERNELS = ("stock", "packed", "skinny")
#: :data:`EAGER_KERNELS` and the skinny kernel on a weight's exact block codes (``coded``: 1.25 bytes a weight, the
#: same output bits; :mod:`specdec.backends.skinny_codes`), timed where a model has such weights (a GGUF file's).
CODED_KERNELS = (*EAGER_KERNELS, "coded")
#: :data:`PACKAGE_KERNELS` and the coded form, for a package of a model with such weights.
PACKAGE_CODED = (*PACKAGE_KERNELS, "coded")
#: Row counts of the eager table: a 1-token step and trees of 8 and 16 rows. The skinny kernel runs 8 rows in about
#: one row's time but 16 in about twice that, where oneDNN's packed GEMM stays flat on some CPUs (AMD Zen 4, float32,
#: SmolLM2's linears per forward: packed 31.0 / 27.3 / 34.2 ms for 1 / 8 / 16 rows, skinny 23.6 / 30.1 / 58.4): timed
#: at 1 and 8 rows only, the kernel won every shape there and cost the composite 3.4 % on Spec-Bench 30, whose
#: adaptive trees average 8.4 nodes (docs/results/2026-11-30-amd-f25m17).
EAGER_ROWS = (1, 8, 16)
#: Bytes per weight of the int8 kernels (a draft head's, :mod:`specdec.backends.draft_int8`) and the codes' (the 4-bit
#: form's two a byte): their copies must exceed :data:`COLD_BYTES` in those bytes.
INT8_BYTES = {"int8": 1, "w8": 1, "coded": 1, "amx4": 0.625, "amx": 1, "amx8": 1}
#: Row counts timed: a 1-token step and a draft tree. (Also timing 2 rows, to pad single rows where the packed kernel
#: ran 2 rows faster than 1 (AMD Zen 3: 576 -> 3072 and 1536 -> 576, 8-12 %), made the whole 1-token step 1.09x slower
#: there, A/B in one process: a shape's time alone does not carry over to that; not kept.)
ROWS = (1, 8)
#: Weight bytes each candidate's copies add up to (above the L3 caches of the CPUs met so far: 32 MB).
COLD_BYTES = 48 << 20
#: Copies of one shape at most (a tiny model's weights stay cached whatever the count; this bounds the time).
MAX_COPIES = 128
#: Relative difference of two candidates' summed times below which they tie (the rule decides).
TIE = 0.05
#: Interquartile range of the passes, relative to their median, above which a measurement is too noisy to decide.
NOISY = 0.5
REPEATS = 7
#: Seconds of passes per shape below which more passes are run (up to MAX_REPEATS).
MIN_SECONDS = 0.25
MAX_REPEATS = 41
#: Rounds of passes per shape before a noisy measurement is given up (the rule decides that shape).
ATTEMPTS = 3
#: Bumped when the method changes (a table measured otherwise is measured again).
VERSION = 3

Shape = tuple[int, int, bool]  # (in_features, out_features, bias)


#: CPUs whose rows on the results page were measured under the rule (:func:`~specdec.backends.kernels.packing_pays`):
#: ``auto`` keeps the rule on them until that row is measured again with the measured choice, so that a choice made
#: on one CPU never costs another (``SPECDEC_KERNELS=measure`` measures there too). ``(vendor, family, model)``, a
#: model of None for every model of the family -> the row.
RULE_KEPT: dict[tuple[str, str, str | None], str] = {
    ("AuthenticAMD", "25", "17"): "AMD Zen 4 (docs/results/2026-11-27-amd-f25m17)",
    ("AuthenticAMD", "26", None): "AMD Zen 5 (docs/results/2026-11-25-cpu-selfdistilled)",
}


def rule_kept() -> str | None:
    """The results-page row this CPU's rule is kept for (:data:`RULE_KEPT`), or None."""
    vendor, family, model = cpu_key(cpu_info())
    return RULE_KEPT.get((vendor, family, model)) or RULE_KEPT.get((vendor, family, None))


def measuring() -> bool:
    """Whether ``weights="auto"`` measures: ``SPECDEC_KERNELS=measure`` or ``rule``; unset (``auto``): measure, except
    on the CPUs of :data:`RULE_KEPT`. A forced ``SPECDEC_CPU_GEMM`` profile means the rule."""
    mode = os.environ.get("SPECDEC_KERNELS", "auto")
    if mode not in ("auto", "measure", "rule"):
        raise ValueError(f"SPECDEC_KERNELS must be 'auto', 'measure' or 'rule', got {mode!r}")
    if mode == "rule" or os.environ.get("SPECDEC_CPU_GEMM"):
        return False
    return mode == "measure" or rule_kept() is None


#: Candidates that run the library's own kernels (:mod:`specdec.backends.skinny`): a table timing any of them is keyed
#: by the library's build too (its source, torch version and flags), so a changed kernel is timed again.
LIBRARY_KERNELS = frozenset({"skinny", "w8", "coded", "amx4", "amx", "amx8", "skinny-attention"})


def machine_key(dtype: torch.dtype, kernels: tuple[str, ...] = KERNELS, rows: tuple[int, ...] = ROWS) -> dict:
    """What decides a kernel's speed here: CPU model and flags, torch version, thread count, dtype (and the candidates
    and row counts where they are not :data:`KERNELS` and :data:`ROWS`, and the library's build where a candidate is
    one of its kernels, :data:`LIBRARY_KERNELS`)."""
    from specdec.backends.skinny import library_name

    info = cpu_info()
    other = {"kernels": list(kernels)} if kernels != KERNELS else {}
    other |= {"rows": list(rows)} if rows != ROWS else {}
    other |= {"library": library_name()} if LIBRARY_KERNELS.intersection(kernels) else {}
    return other | {
        "cpu": info.get("model name", ""),
        "family": info.get("cpu family", ""),
        "model": info.get("model", ""),
        "flags": sorted(cpu_flags()),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "dtype": str(dtype),
        "version": VERSION,
    }


def table_path(dtype: torch.dtype, kernels: tuple[str, ...] = KERNELS, rows: tuple[int, ...] = ROWS) -> Path:
    """Where this machine's table for ``dtype`` (and ``kernels``, ``rows``) is cached (a hash of :func:`machine_key`
    names it)."""
    from specdec.models import cache_dir

    key = machine_key(dtype, kernels, rows)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir() / "kernels" / f"{key['dtype'].removeprefix('torch.')}-{key['threads']}t-{digest}.json"


def sides(
    shape: Shape,
    dtype: torch.dtype,
    generator: torch.Generator,
    cold_bytes: int = COLD_BYTES,
    kernels: tuple[str, ...] = KERNELS,
) -> dict[str, list[nn.Module]]:
    """``{kernel: [copies of a linear of shape]}`` over ``cold_bytes`` of weights (at most :data:`MAX_COPIES`): plain
    ``nn.Linear`` s and their twins (same values) on each other kernel in ``kernels``: packed where oneDNN packs
    ``dtype`` here, skinny (float32; raises :class:`~specdec.backends.skinny.SkinnyError` where it cannot run)."""
    n_in, n_out, bias = shape
    itemsize = min(INT8_BYTES.get(k, dtype.itemsize) for k in kernels)  # copies enough for the leanest kernel's bytes
    plain = []
    for _ in range(min(MAX_COPIES, max(1, math.ceil(cold_bytes / (n_in * n_out * itemsize))))):
        lin = nn.Linear(n_in, n_out, bias=bias, dtype=dtype)
        with torch.no_grad():
            lin.weight.copy_(torch.randn(n_out, n_in, generator=generator) / math.sqrt(n_in))
        plain.append(lin)
    mods = {"stock": plain} if "stock" in kernels else {}
    if "packed" in kernels and packing_error(dtype) is None:
        mods["packed"] = [PackedLinear(lin, keep_weight=True) for lin in plain]
    if "int8" in kernels:
        mods["int8"] = [Int8Linear(lin, keep_weight=False) for lin in plain]
    if "skinny" in kernels:
        mods["skinny"] = [SkinnyLinear(lin) for lin in plain]
    if "w8" in kernels:
        mods["w8"] = [W8Linear(lin, keep_weight=False) for lin in plain]
    if "coded" in kernels and n_in % QBLOCK == 0:  # codes of random values: the kernel's speed does not depend on them
        mods["coded"] = [SkinnyLinear(lin, Codes.synthetic(n_out, n_in, generator)) for lin in plain]
    for form in AMX_KERNELS:  # the AMX forms: their speed depends on the codes' range (amx_synthetic), not values
        if form in kernels and n_in % QBLOCK == 0 and n_out % 16 == 0:
            mods[form] = [SkinnyLinear(lin, amx_synthetic(n_out, n_in, generator, form), amx=form) for lin in plain]
    return mods


@torch.no_grad()
def time_shape(
    mods: dict[str, list[nn.Module]], rows: tuple[int, ...] = ROWS, repeats: int = REPEATS
) -> dict[str, dict[int, list[float]]]:
    """Seconds per call of every pass for every (kernel, row count), interleaved pass by pass after a warm-up pass;
    at least ``repeats`` passes, more where a round of them takes under :data:`MIN_SECONDS` / ``repeats`` (short
    passes are the noisy ones), at most :data:`MAX_REPEATS`."""
    first = next(iter(mods.values()))[0]
    plain = next((layers[0] for layers in mods.values() if isinstance(layers[0], nn.Linear)), None)
    dtype = torch.float32 if plain is None else plain.weight.dtype  # the int8 kernels take float32 inputs
    xs = {n: torch.randn(n, first.in_features).to(dtype) for n in rows}
    times: dict[str, dict[int, list[float]]] = {k: {n: [] for n in rows} for k in mods}
    t0 = time.perf_counter()
    for layers in mods.values():  # the warm-up round, which also sizes the number of passes
        for x in xs.values():
            for layer in layers:
                layer(x)
    passes = min(MAX_REPEATS, max(repeats, math.ceil(MIN_SECONDS / max(time.perf_counter() - t0, 1e-6))))
    for _ in range(passes):
        for kernel, layers in mods.items():
            for n, x in xs.items():
                t0 = time.perf_counter()
                for layer in layers:
                    layer(x)
                times[kernel][n].append((time.perf_counter() - t0) / len(layers))
    return times


def _problem(passes: dict[str, dict[int, list[float]]]) -> str:
    """Why a shape's passes cannot decide (a time of zero, too noisy), or ``""``."""
    for kernel, by_rows in passes.items():
        for n, v in by_rows.items():
            median = statistics.median(v)
            if not median > 0:
                return f"{kernel} timed {median} s for {n} rows"
            q = statistics.quantiles(v, n=4) if len(v) > 1 else [median, median, median]
            if (q[2] - q[0]) / median > NOISY:
                return f"{kernel} passes for {n} rows spread {(q[2] - q[0]) / median:.0%} of their median"
    return ""


@dataclass
class KernelTable:
    """Measured milliseconds per call, ``ms[shape][kernel][rows]``, for one machine key and dtype; ``failed[shape]``
    says why a shape could not be measured (the rule decides it)."""

    key: dict
    ms: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    @staticmethod
    def name(shape: Shape) -> str:
        return f"{shape[0]}x{shape[1]}" + ("+bias" if shape[2] else "")

    @staticmethod
    def shape(name: str) -> Shape:
        """The inverse of :meth:`name`."""
        n_in, n_out = (int(p) for p in name.removesuffix("+bias").split("x"))
        return (n_in, n_out, name.endswith("+bias"))

    def has(self, shape: Shape) -> bool:
        return self.name(shape) in self.ms or self.name(shape) in self.failed

    @property
    def row_counts(self) -> tuple[int, ...]:
        """The row counts this table timed (:data:`ROWS` unless its key names others)."""
        return tuple(self.key.get("rows", ROWS))

    def cost(self, shape: Shape, kernel: str) -> float | None:
        """``T(1) + T(8)`` (summed over :attr:`row_counts`) in ms of ``kernel`` on ``shape`` as ``auto`` runs it
        without row-invariant numerics (``packed`` with its single row on the kernel of :meth:`single_row_kernel`);
        None where not measured. With row-invariant numerics a packed single row runs packed: the choice is made
        before they are resolved, so it may pack a shape by a single-row time it will not get (float32 rarely has
        them on; bfloat16 packs every linear where it has them)."""
        by_rows = self.ms.get(self.name(shape), {}).get(kernel)
        if by_rows is None:
            return None
        times = {n: by_rows[str(n)] for n in self.row_counts}
        single = self.single_row_kernel(shape) if kernel == "packed" else None
        if single is not None:
            times[1] = self.ms[self.name(shape)][single]["1"]
        return sum(times.values())

    def choice(self, shape: Shape) -> str | None:
        """The kernel with the least summed time (:meth:`cost`); None where the shape failed, has one candidate or
        the best ties the runner-up (within :data:`TIE`: the rule decides)."""
        ms = self.ms.get(self.name(shape))
        if not ms or len(ms) < 2:
            return next(iter(ms)) if ms else None
        cost = {kernel: self.cost(shape, kernel) for kernel in ms}
        best, second = sorted(cost, key=cost.get)[:2]
        return best if cost[best] < (1 - TIE) * cost[second] else None

    def single_row_kernel(self, shape: Shape) -> str | None:
        """The kernel one row of a packed ``shape`` runs faster on: of ``stock`` and ``skinny`` (those measured) the
        one with the least ``T(1)``, where that is under ``1 - TIE`` of packed's; None (packed) otherwise."""
        ms = self.ms.get(self.name(shape), {})
        if "packed" not in ms:
            return None
        best = min((k for k in ("stock", "skinny") if k in ms), key=lambda k: ms[k]["1"], default=None)
        return best if best is not None and ms[best]["1"] < (1 - TIE) * ms["packed"]["1"] else None

    def to_json(self) -> dict:
        """The measured shapes (failed ones are measured again by the next process)."""
        return {"key": self.key, "ms": self.ms}

    def rows(self, rule: dict[str, str] | None = None) -> list[str]:
        """The table as lines: shape, each kernel's ms per row count, the measured choice (and the rule's)."""
        kernels, counts = tuple(self.key.get("kernels", KERNELS)), self.row_counts
        width = 11 * len(counts) + 4
        head = "/".join(map(str, counts)) + " rows (ms)"
        lines = [f"{'shape':>16s}  " + "  ".join(f"{k + ' ' + head:>{width}s}" for k in kernels) + "  choice"]
        for name in sorted({*self.ms, *self.failed}, key=self.shape):
            ms = self.ms.get(name, {})
            cells = [
                " / ".join(f"{ms[k][str(n)]:8.3f}" for n in counts).rjust(width) if k in ms else f"{'-':>{width}s}"
                for k in kernels
            ]
            said = self.failed.get(name) or (self.choice(self.shape(name)) or "tie: the rule")
            single = self.single_row_kernel(self.shape(name))
            if said == "packed" and single is not None:
                said += f", 1 row {single}"
            if rule and name in rule:
                said += f" (rule: {rule[name]})"
            lines.append(f"{name:>16s}  " + "  ".join(cells) + f"  {said}")
        return lines


_TABLES: dict[Path, KernelTable] = {}  # this process's tables (failed shapes are not measured twice in a process)


def _load(path: Path, key: dict) -> KernelTable:
    if path in _TABLES and _TABLES[path].key == key:
        return _TABLES[path]
    try:
        data = json.loads(path.read_text())
        if data.get("key") == key:
            return KernelTable(key, data["ms"])
    except (OSError, ValueError, KeyError, TypeError):
        pass  # missing or damaged: measured again
    return KernelTable(key)


def kernel_table(
    shapes: list[Shape] | tuple[Shape, ...],
    dtype: torch.dtype,
    refresh: bool = False,
    kernels: tuple[str, ...] = KERNELS,
    rows: tuple[int, ...] = ROWS,
) -> KernelTable:
    """This machine's table for ``dtype``, the candidate ``kernels`` and the row counts ``rows`` with every shape in
    ``shapes``: read from the cache, the missing shapes measured (warning once for each that fails) and the cache
    rewritten."""
    key, path = machine_key(dtype, kernels, rows), table_path(dtype, kernels, rows)
    table = KernelTable(key) if refresh else _load(path, key)
    missing = [s for s in dict.fromkeys(shapes) if not table.has(s)]
    if not missing:
        return table
    generator = torch.Generator().manual_seed(0)
    for shape in missing:
        name = KernelTable.name(shape)
        try:
            mods = sides(shape, dtype, generator, kernels=kernels)
            for _ in range(ATTEMPTS):  # a noisy round (another process woke up) is measured again
                passes = time_shape(mods, rows)
                problem = _problem(passes) if len(passes) > 1 else ""  # one candidate: nothing to decide
                if not problem:
                    break
            del mods
        except RuntimeError as error:  # a kernel raising in this build: the rule decides this shape
            passes, problem = {}, f"{type(error).__name__}: {str(error).strip().splitlines()[0]}"
        if problem:
            table.failed[name] = problem
            warnings.warn(
                f"kernel measurement for the {dtype} {name} linear failed ({problem}); the rule decides it",
                FastPathWarning,
                stacklevel=3,
            )
        else:
            table.ms[name] = {
                k: {str(n): statistics.median(v) * 1e3 for n, v in by_rows.items()} for k, by_rows in passes.items()
            }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(table.to_json(), indent=1))
    tmp.replace(path)
    _TABLES[path] = table
    return table


def linear_shape(linear: nn.Linear) -> Shape:
    return (linear.in_features, linear.out_features, linear.bias is not None)


def stacked_shape(group: list[nn.Linear]) -> Shape:
    """The shape of a group's stacked linear (:mod:`specdec.backends.stacking`): the members' outputs summed."""
    return (group[0].in_features, sum(m.out_features for m in group), group[0].bias is not None)
