"""The CPU at hand and what this torch build can run on it: its identity and feature flags, the dtypes it computes
natively, whether oneDNN packs a dtype's linears here (tried, not read from flags), the GEMM library ``weights="auto"``
falls back to by rule, and the one-line summary every result and test run starts with."""

from __future__ import annotations

import functools
import os
import platform

import torch

__all__ = [
    "KERNEL_FLAGS",
    "NATIVE_DTYPE_FLAGS",
    "PACKED_DTYPES",
    "cpu_flags",
    "cpu_gemm_profile",
    "cpu_info",
    "cpu_name",
    "machine_summary",
    "onednn_missing",
    "packing_error",
    "slow_dtype_reason",
]

#: The weight dtypes :class:`~specdec.backends.kernels.PackedLinear` runs.
PACKED_DTYPES = (torch.float32, torch.bfloat16)


def cpu_gemm_profile() -> str:
    """``"mkl"`` on an Intel CPU whose torch uses MKL (fast small-row GEMMs), else ``"onednn"`` (pack everything).

    ``SPECDEC_CPU_GEMM=mkl|onednn`` overrides the detection (e.g. to reproduce one machine's choice on another).
    """
    forced = os.environ.get("SPECDEC_CPU_GEMM", "")
    if forced in ("mkl", "onednn"):
        return forced
    if forced:
        raise ValueError(f"SPECDEC_CPU_GEMM must be 'mkl' or 'onednn', got {forced!r}")
    return "mkl" if torch.backends.mkl.is_available() and _cpu_vendor() == "GenuineIntel" else "onednn"


@functools.cache
def cpu_info() -> dict[str, str]:
    """The first CPU's fields in /proc/cpuinfo (``vendor_id``, ``model name``, ``cpu family``, ``model``, ``flags``,
    ...); empty where it cannot be read."""
    info: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if not sep and info:  # the blank line after the first processor's block
                    break
                info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return info


def cpu_key(info: dict[str, str]) -> tuple[str, str, str]:
    """``(vendor_id, cpu family, model)`` from :func:`cpu_info`'s fields: the key of the tables of CPUs kept on a rule
    (the caller passes the fields, so a test can patch its module's ``cpu_info``)."""
    return info.get("vendor_id", ""), info.get("cpu family", ""), info.get("model", "")


def cpu_name() -> str:
    """The CPU's model name with its family and model numbers (which CPU a result was measured on)."""
    info = cpu_info()
    if "model name" not in info:
        return platform.processor() or platform.machine()
    return f"{info['model name']} (family {info.get('cpu family', '?')} model {info.get('model', '?')})"


def _cpu_vendor() -> str:
    return cpu_info().get("vendor_id") or platform.processor()


#: The CPU instructions that compute each low-precision dtype natively (/proc/cpuinfo flags); without any of them
#: torch converts every element to float32 and back: correct, and slower than float32 itself where the conversions
#: outweigh the halved bytes (a tree forward's GEMMs; a 1-token step, memory-bound, can gain: measured.dtype_cost).
NATIVE_DTYPE_FLAGS = {torch.bfloat16: ("avx512_bf16", "amx_bf16"), torch.float16: ("avx512_fp16", "amx_fp16")}


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags from /proc/cpuinfo (empty where it cannot be read)."""
    return frozenset(cpu_info().get("flags", "").split())


#: The CPU flags that decide which kernels run here: vector width, the instructions oneDNN needs to pack bfloat16
#: (AVX-512 BW/VL/DQ or AVX-NE-CONVERT), native bfloat16/float16 arithmetic, AMX.
KERNEL_FLAGS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512dq",
    "avx512_bf16",
    "avx512_fp16",
    "avx_ne_convert",
    "amx_tile",
    "amx_bf16",
)


def machine_summary() -> str:
    """One line: the CPU, which of :data:`KERNEL_FLAGS` it has, what bfloat16 runs on, torch and its threads (printed
    first by ``make test`` and ``specdec doctor``, so every result says where it was measured)."""
    flags = cpu_flags()
    have = " ".join(f for f in KERNEL_FLAGS if f in flags) or "none"
    missing = " ".join(f for f in KERNEL_FLAGS if f not in flags) or "none"
    native = "native" if slow_dtype_reason(torch.bfloat16) is None else "no native arithmetic"
    packs = "packs" if packing_error(torch.bfloat16) is None else "oneDNN cannot pack it"
    return (
        f"CPU: {cpu_name()}; kernel flags: {have} (missing: {missing}); bfloat16: {native}, {packs}; "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )


def slow_dtype_reason(dtype: torch.dtype) -> str | None:
    """Why ``dtype`` will run slowly on this CPU (no native instructions for it), or None."""
    native = NATIVE_DTYPE_FLAGS.get(dtype)
    if native is None or cpu_flags() & set(native):
        return None
    return f"this CPU has none of {', '.join(native)}, so {dtype} runs through float32 conversions"


@functools.cache
def _pack_trial(dtype: torch.dtype) -> str | None:
    """oneDNN's own refusal when asked to pack and run a small ``dtype`` linear on this CPU, or None where it runs."""
    try:
        x = torch.arange(32, dtype=dtype).reshape(2, 16)  # exact in bfloat16, and so is its product with I
        packed = torch.ops.mkldnn._reorder_linear_weight(torch.eye(16, dtype=dtype), 16)
        y = torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
    except (RuntimeError, AttributeError) as error:
        return str(error).strip().splitlines()[0]
    return None if torch.equal(y, x) else "its packed product of a small exact case is wrong"


def onednn_missing() -> str | None:
    """Why this torch build cannot run packed linears at all (no oneDNN linear kernels), or None."""
    if torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise"):
        return None
    return "this torch build has no oneDNN (mkldnn) linear kernels"


def packing_error(dtype: torch.dtype) -> str | None:
    """Why linears of ``dtype`` cannot be packed on this CPU and torch build, or None where they can.

    Decided by trying once per dtype, not by reading flags: oneDNN packs bfloat16 where the CPU has ``avx_ne_convert``
    or ``avx512bw``, ``avx512vl`` and ``avx512dq`` (torch 2.13), native bfloat16 arithmetic or not, and refuses it
    on an AVX2-only CPU such as AMD Zen 3.
    """
    if dtype not in PACKED_DTYPES:
        return f"packed weights run {' or '.join(map(str, PACKED_DTYPES))}, not {dtype}"
    missing = onednn_missing()
    if missing:
        return missing
    error = _pack_trial(dtype)
    return None if error is None else f"oneDNN cannot pack {dtype} linears on this CPU ({error})"
