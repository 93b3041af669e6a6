"""Whether a float32 CPU target's attention runs on the few-row kernel (``specdec::skinny_attention``) or SDPA:
measured on the CPU at hand (``SPECDEC_ATTENTION=auto``, the default), or as asked (``sdpa``, ``few-row``).

Why measured: the kernel's lead over SDPA depends on the CPU and on the shapes. On the AMD Zen 4 (family 25 model 17,
2026-11-30, ``docs/results/2026-11-30-attention-amd-f25m17``) SDPA took 21-73 us for one query row against 200-1000
keys and the kernel 11-41; for a batch of 4 rows of 3 tree nodes over 300 keys 247 us against 86; on Spec-Bench, with
the linears packed as before, EAGLE-3 and the composite ran 5 % faster (five one-process A/Bs). On the Intel Xeon of
family 6 model 106 (2026-11-29, ``docs/results/2026-11-29-skinny-attention-intel-f6m106``) the kernel alone was also
faster (1 row in 0.43x SDPA's time, 8-16 rows in 0.55-0.95x), but in the model its lead shrank (keys cold) and
Spec-Bench ran the trees 0-4 % slower: there an end-to-end A/B decided against the measurement alone, so that CPU keeps
SDPA (:data:`SDPA_KEPT`).

Row invariance: where every linear also runs on the skinny GEMM, a float32 forward is row-invariant, a tree's row
bitwise its 1-token step (both kernels' contracts; ``tests/test_skinny_attention.py`` checks it on SmolLM2, with SDPA as
the negative control), so greedy speculation emits plain decoding's tokens with no near-tie allowance, without the
float64 attention of the invariant numerics (:mod:`specdec.backends.gqa`), which take the kernel wherever it serves the
model (:func:`few_row_serves`) whatever its speed.

The measurement (:func:`attention_times`): both run the model's head shape for 1 and 8 query rows over :data:`KEYS`
cached keys with a tree's mask, interleaved pass by pass (:data:`PASSES`, the median kept); the kernel is chosen where
its ``T(1) + T(8)`` is at most SDPA's plus :data:`~specdec.backends.kernel_times.TIE` (a tie: the kernel, which also
serves row-invariant forwards). Cached per machine (:func:`~specdec.backends.kernel_times.machine_key`), head shape
and kernel build, beside the linears' tables; ``specdec doctor`` prints it. SDPA stays, unmeasured, where
:func:`attention_measures` says no (``SPECDEC_SKINNY=off``, ``SPECDEC_KERNELS=rule`` or a forced
``SPECDEC_CPU_GEMM`` profile, a CPU of :data:`SDPA_KEPT`), for a model that is not float32 on the CPU, a head size
that is not a multiple of 8, or where the kernel library cannot run (the reason is returned).
"""

from __future__ import annotations

import json
import os
import statistics
import time

import torch
from torch import nn

from specdec.backends.kernel_times import TIE, table_path

__all__ = [
    "KEYS",
    "MODES",
    "PASSES",
    "SDPA_KEPT",
    "attention_measures",
    "attention_mode",
    "attention_shape",
    "attention_times",
    "few_row_serves",
    "kernel_shape",
    "skinny_attention_fits",
    "skinny_forward",
]

#: Cached keys each timed call attends over (a mid-length chat context).
KEYS = 256
#: Interleaved timing passes (the median pass is kept); each pass times :data:`CALLS` calls per candidate and rows.
PASSES = 7
CALLS = 32
#: The candidates' names in the cached table (its file is the linears' table name for these kernels).
CANDIDATES = ("sdpa", "skinny-attention")
ROWS = (1, 8)
#: ``SPECDEC_ATTENTION``'s values for ``weights="auto"`` on eager shapes: measured (the default), SDPA, the kernel
#: wherever it serves the model. A model left on stock linears runs SDPA, and row-invariant numerics take the kernel
#: wherever it serves, whichever is set.
MODES = ("auto", "sdpa", "few-row")
#: CPUs (vendor, family, model) that keep SDPA under ``auto`` because an end-to-end A/B decided against the kernel
#: although it measured faster alone (``SPECDEC_KERNELS=measure`` measures there too); the value names the entry.
SDPA_KEPT: dict[tuple[str, str, str], str] = {
    ("GenuineIntel", "6", "106"): "Intel Xeon (docs/results/2026-11-29-skinny-attention-intel-f6m106)",
}


def attention_shape(model: nn.Module) -> tuple[int, int, int] | None:
    """``(query heads, kv heads, head size)`` from ``model.config``, or None where it does not say."""
    config = getattr(model, "config", None)
    heads = getattr(config, "num_attention_heads", None)
    if not heads:
        return None
    kv = getattr(config, "num_key_value_heads", None) or heads
    size = getattr(config, "head_dim", None) or config.hidden_size // heads
    return int(heads), int(kv), int(size)


def attention_mode() -> str:
    """``SPECDEC_ATTENTION``: ``auto`` (default: measured here), ``sdpa`` or ``few-row`` (:data:`MODES`)."""
    mode = os.environ.get("SPECDEC_ATTENTION", "auto")
    if mode not in MODES:
        raise ValueError(f"SPECDEC_ATTENTION must be one of {', '.join(MODES)}, got {mode!r}")
    return mode


def attention_measures() -> bool:
    """Whether ``auto`` measures the kernel against SDPA here: not with ``SPECDEC_SKINNY=off``,
    ``SPECDEC_KERNELS=rule`` or a forced ``SPECDEC_CPU_GEMM`` profile, nor on a CPU of :data:`SDPA_KEPT` (unless
    ``SPECDEC_KERNELS=measure``). Independent of the linears' choice: a CPU that keeps their vendor rule
    (:data:`~specdec.backends.kernel_times.RULE_KEPT`) still measures its attention."""
    from specdec.backends.cpu import cpu_info, cpu_key
    from specdec.backends.skinny_choice import skinny_off

    kernels = os.environ.get("SPECDEC_KERNELS", "auto")
    if skinny_off() or kernels == "rule" or os.environ.get("SPECDEC_CPU_GEMM"):
        return False
    kept = cpu_key(cpu_info()) in SDPA_KEPT
    return not kept or kernels == "measure"


def kernel_shape(model: nn.Module) -> tuple[int, int, int] | None:
    """``model``'s head shape (:func:`attention_shape`) where the kernel can run its attention: float32 on the CPU,
    query heads a multiple of kv heads, a head size that is a multiple of 8; else None."""
    shape = attention_shape(model)
    param = next(model.parameters(), None)
    if shape is None or param is None or param.dtype != torch.float32 or param.device.type != "cpu":
        return None
    heads, kv, size = shape
    return None if size % 8 or heads % kv else shape


def few_row_serves(model: nn.Module) -> bool:
    """Whether the few-row kernel can run ``model``'s attention here, whatever its speed (:func:`kernel_shape`, the
    kernel library available, ``SPECDEC_SKINNY`` not ``off``). Row-invariant numerics
    (:mod:`specdec.backends.numerics`) take it there instead of float64 SDPA."""
    from specdec.backends.skinny import unavailable
    from specdec.backends.skinny_choice import skinny_off

    return kernel_shape(model) is not None and not skinny_off() and unavailable() is None


def skinny_forward(model: nn.Module) -> bool:
    """Whether every linear of ``model`` runs on the skinny GEMM (none packed, none plain): with the few-row attention
    its float32 forward is then row-invariant (the module docstring)."""
    from specdec.backends.kernels import plain_linear, runs_packed
    from specdec.backends.skinny import uses_skinny

    def elsewhere(m: nn.Module) -> bool:  # a linear on another kernel, or one the fast path does not touch
        linear_like = isinstance(m, nn.Linear) or type(m).__name__ == "Conv1D"  # a subclass, transformers' Conv1D
        return plain_linear(m) or runs_packed(m) or (linear_like and type(m) is not nn.Linear)

    return uses_skinny(model) and not any(elsewhere(m) for m in model.modules())


def skinny_attention_fits(model: nn.Module) -> tuple[bool, str]:
    """``(fits, reason)``: whether ``model``'s attention should run on the few-row kernel here (the module
    docstring), and from what (asked for, a cached or new measurement, or why not; ``""`` where SDPA was asked for
    or nothing is measured)."""
    mode = attention_mode()
    if mode == "sdpa":
        return False, ""
    if mode == "few-row":
        serves = few_row_serves(model)
        return serves, "the few-row attention asked for (SPECDEC_ATTENTION=few-row)" if serves else ""
    return attention_times(model)[:2]


def attention_times(model: nn.Module) -> tuple[bool, str, dict[str, dict[str, float]] | None]:
    """``(fits, reason, times)``: the few-row kernel's and SDPA's microseconds per call for ``model``'s head shape
    (``times[candidate][rows]``, measured once per machine and cached; None where not measured, ``reason`` saying
    why, ``""`` where :func:`attention_measures` says no or the model has no head shape the kernel serves) and
    whether the kernel fits, whatever runs the linears. A measurement that fails keeps SDPA, the reason returned."""
    from specdec.backends.skinny import _library, unavailable

    shape = kernel_shape(model)
    if shape is None or not attention_measures():
        return False, "", None
    heads, kv, size = shape
    if (why := unavailable()) is not None:
        return False, f"attention on SDPA: {why}", None
    path = table_path(torch.float32, CANDIDATES)
    entry = f"{heads}x{kv}x{size}-{_library()[0]}"
    table = json.loads(path.read_text()) if path.exists() else {}
    if entry not in table:
        try:
            table[entry] = _measure(heads, kv, size)
        except RuntimeError as error:  # the kernel or SDPA raising on this machine: SDPA, and why
            return False, f"attention on SDPA: its measurement failed ({error})", None
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")  # another process may read the table meanwhile
        tmp.write_text(json.dumps(table, indent=1, sort_keys=True))
        tmp.replace(path)
    times = table[entry]
    sdpa, skinny = (sum(times[name][str(t)] for t in ROWS) for name in CANDIDATES)
    fits = skinny <= (1 + TIE) * sdpa
    return (
        fits,
        (
            f"the few-row kernel's T(1) + T(8) {skinny:.0f} us against SDPA's {sdpa:.0f} us here ({path.name}): "
            f"{'within' if fits else 'beyond'} the tie margin"
        ),
        times,
    )


def _inputs(heads: int, kv: int, size: int, rows: int, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    """A tree forward's attention inputs: q ``[1, heads, rows, size]``, k/v ``[1, kv, KEYS, size]``, and the mask of
    a chain of ``rows`` nodes after ``KEYS - rows`` committed keys (``[1, 1, rows, KEYS]``, additive)."""
    q = torch.randn(1, heads, rows, size, generator=generator)
    k, v = (torch.randn(1, kv, KEYS, size, generator=generator) for _ in range(2))
    allowed = torch.ones(rows, KEYS, dtype=torch.bool)
    allowed[:, KEYS - rows :] = torch.ones(rows, rows, dtype=torch.bool).tril()
    mask = torch.zeros(rows, KEYS).masked_fill_(~allowed, torch.finfo(torch.float32).min)[None, None]
    return q, k, v, mask


def _measure(heads: int, kv: int, size: int) -> dict[str, dict[str, float]]:
    """Microseconds per call, median of :data:`PASSES` interleaved passes, per candidate and row count."""
    from specdec.backends.gqa import _gqa_sdpa

    generator = torch.Generator().manual_seed(0)
    scale = size**-0.5
    inputs = {rows: _inputs(heads, kv, size, rows, generator) for rows in ROWS}
    runs = {
        "sdpa": lambda q, k, v, m: _gqa_sdpa(None, q, k, v, m, scaling=scale),
        "skinny-attention": lambda q, k, v, m: torch.ops.specdec.skinny_attention(q, k, v, m, scale),
    }
    passes: dict[str, dict[int, list[float]]] = {name: {rows: [] for rows in ROWS} for name in CANDIDATES}
    with torch.inference_mode():
        for index in range(PASSES + 1):  # the first pass warms up and is dropped
            for name in CANDIDATES:
                for rows in ROWS:
                    start = time.perf_counter()
                    for _ in range(CALLS):
                        runs[name](*inputs[rows])
                    if index:
                        passes[name][rows].append((time.perf_counter() - start) / CALLS * 1e6)
    return {name: {str(rows): statistics.median(passes[name][rows]) for rows in ROWS} for name in CANDIDATES}
