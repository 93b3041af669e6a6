"""A row-invariant float32 GEMM for the few rows of a decoding step or a draft tree (``specdec::skinny_linear``).

The kernel (``skinny.cpp`` beside this file) streams each weight once per call and multiplies every weight vector it
loads into up to 16 input rows held in registers, so a tree of 8 rows costs about what one row costs where the step
is bound by memory. Measured on the 2-core Intel Xeon of family 6 model 106 (weights cold, 2 threads,
``docs/results/2026-11-29-skinny-intel-f6m106``): the 49152 x 576 lm_head 6.9 ms for 8 rows against 20.5 ms for
``F.linear`` (MKL), one row even (4.9 / 5.0 ms); a 576 x 576 projection's one row 24 % slower than MKL's, its 8 rows
1.6x faster. In an ahead-of-time package the 8-row forward fell from 50-55 to 35-44 ms (T(8)/T(1) 1.19-1.35
against 1.44-1.62). ``weights="auto"`` puts a linear on it where its shape measured faster here
(:mod:`specdec.backends.skinny_choice`); :func:`skinny_linears` does it by hand.

Contract (row invariance): every output ``y[m, n]`` is summed in one fixed order, whatever the number of rows in the
call up to :data:`INVARIANT_ROWS` (``skinny.cpp`` says which); a row computed alone and the same row inside a tree
are bitwise equal. A longer input is a prompt's prefill, which plain and speculative decoding share and no tree is
compared with: it runs on torch's own GEMM, about twice as fast there.

How it is built: on first use, compiled for this torch with the C++ compiler torch's extensions use
(``torch.utils.cpp_extension``, about 40 s on 2 cores), cached under ``cache_dir()/ext/`` keyed by the source, the
build flags (:data:`BUILD`) and the torch version, and loaded as a library that registers the op. A machine without
a compiler, or a CPU without AVX2 and FMA, does not get it: :func:`unavailable` says why, and nothing else changes.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from specdec.backends.cpu import cpu_flags
from specdec.backends.kernels import each_child, plain_linear, swap_module
from specdec.backends.skinny_codes import Codes
from specdec.models import cache_dir

__all__ = [
    "C_SHIM",
    "C_SHIM_AMX",
    "C_SHIM_Q",
    "built",
    "coded_names",
    "kernel_label",
    "INVARIANT_ROWS",
    "SOURCE",
    "SOURCES",
    "SkinnyError",
    "SkinnyLinear",
    "W8Linear",
    "load",
    "package_options",
    "plain_linears",
    "skinny_linears",
    "skinny_names",
    "unavailable",
    "uses_codes",
    "uses_skinny",
]

SOURCE = Path(__file__).with_name("skinny.cpp")
#: Every source of the kernel library: the GEMM, its int8-weight twin (:class:`W8Linear`), its exact block-code twin
#: (:class:`SkinnyLinear` with codes, :mod:`specdec.backends.skinny_codes`), what the three share (``skinny_isa.h``),
#: the few-row attention
#: (:mod:`specdec.backends.attention_choice`), and the small per-cycle steps of sampling
#: (:mod:`specdec.backends.native`: the sampled trees' verification plan, inverse-CDF draws, top-p's cut).
SOURCES = (
    SOURCE,
    Path(__file__).with_name("skinny_w8.cpp"),
    Path(__file__).with_name("skinny_q.cpp"),
    Path(__file__).with_name("skinny_amx.cpp"),
    Path(__file__).with_name("skinny_isa.h"),
    Path(__file__).with_name("skinny_attention.cpp"),
    Path(__file__).with_name("skinny_attention_impl.h"),
    Path(__file__).with_name("multiround.cpp"),
    Path(__file__).with_name("draws.cpp"),
    Path(__file__).with_name("nucleus.cpp"),
)
log = logging.getLogger(__name__)
#: The most rows whose outputs are summed in the kernel's fixed order (``INVARIANT_ROWS`` in ``skinny.cpp``; the
#: package's largest tree, :data:`specdec.backends.aot.MAX_ROWS`); a longer input, a prompt's prefill, runs on
#: torch's own GEMM.
INVARIANT_ROWS = 64
#: Bumped when the build's flags change (part of the cached library's name, as the source and the torch version are).
BUILD = "2"


class SkinnyError(RuntimeError):
    """The kernel cannot run here (no AVX2 and FMA, no compiler, a failed build); the message says which."""


def _library() -> tuple[str, Path]:
    """The kernel library's name and build folder for this source, torch and :data:`BUILD`."""
    code = b"".join(path.read_bytes() for path in SOURCES)
    digest = hashlib.sha256(code + torch.__version__.encode() + BUILD.encode()).hexdigest()[:12]
    name = f"specdec_skinny_{digest}"
    return name, cache_dir() / "ext" / name


@functools.cache
def library_name() -> str:
    """The kernel library's name: a digest of its source, the torch version and :data:`BUILD` (what the measured
    choices' tables are keyed by, :func:`~specdec.backends.kernel_times.machine_key`); ``"unreadable"`` where a
    source file cannot be read (the library cannot be built then either: :func:`load` says why)."""
    try:
        return _library()[0]
    except OSError:
        return "unreadable"


def built() -> bool:
    """Whether the kernel library is already built on this machine (loading it then takes no compiler run)."""
    name, build = _library()
    return (build / f"{name}.so").exists()


@functools.cache
def load() -> None:
    """Build (once per source and torch version) and load the kernel library, registering ``specdec::skinny_linear``
    and ``specdec::skinny_attention``.

    Raises:
        SkinnyError: the CPU lacks AVX2 and FMA, or the build failed (the compiler's message is kept as the cause).
    """
    flags = cpu_flags()
    if "avx512f" not in flags and not {"avx2", "fma"} <= flags:
        raise SkinnyError("the skinny kernel needs a CPU with AVX2 and FMA (or AVX-512)")
    name, build = _library()
    if not built():
        log.warning("specdec: building the skinny kernel once for this torch (about a minute): %s", build)
    build.mkdir(parents=True, exist_ok=True)
    try:
        from torch.utils.cpp_extension import load as build_extension

        build_extension(  # -fopenmp: at::parallel_for runs on torch's OpenMP threads only when compiled with it
            name,
            [str(path) for path in SOURCES if path.suffix == ".cpp"],
            extra_cflags=["-O3", "-fopenmp"],
            extra_ldflags=["-fopenmp"],
            build_directory=str(build),
            is_python_module=False,
            verbose=False,
        )
    except Exception as exc:  # a missing compiler, headers or a failed build: the reason is what the user needs
        raise SkinnyError(f"the skinny kernel did not build ({type(exc).__name__}: {str(exc)[-300:]})") from exc
    # visible to libraries loaded later: an ahead-of-time package calls the op's C shim by name (C_SHIM)
    ctypes.CDLL(str(build / f"{name}.so"), mode=os.RTLD_GLOBAL)
    _register_fake()


#: The op's C shim, as AOTInductor declares it (``aot_inductor.custom_ops_to_c_shims``): a package built with it calls
#: the kernel directly instead of through its proxy executor.
C_SHIM = (
    "AOTITorchError aoti_torch_cpu_skinny_linear(AtenTensorHandle x, AtenTensorHandle w, AtenTensorHandle* b, "
    "int64_t isa, AtenTensorHandle* ret0)"
)


#: The block-code twin's C shim (:class:`SkinnyLinear` with codes).
C_SHIM_Q = (
    "AOTITorchError aoti_torch_cpu_skinny_linear_q(AtenTensorHandle x, AtenTensorHandle q, AtenTensorHandle d, "
    "AtenTensorHandle m, AtenTensorHandle* b, int64_t isa, AtenTensorHandle* ret0)"
)


#: The block codes' AMX form's C shim (:class:`SkinnyLinear` with ``amx``, :mod:`specdec.backends.skinny_amx`).
C_SHIM_AMX = (
    "AOTITorchError aoti_torch_cpu_skinny_linear_amx(AtenTensorHandle x, AtenTensorHandle q, AtenTensorHandle d, "
    "AtenTensorHandle m, AtenTensorHandle* b, int64_t small, AtenTensorHandle* ret0)"
)


#: The few-row attention's C shim (``specdec::skinny_attention``, :func:`specdec.backends.aot.package_attention`).
C_SHIM_ATTENTION = (
    "AOTITorchError aoti_torch_cpu_skinny_attention(AtenTensorHandle q, AtenTensorHandle k, AtenTensorHandle v, "
    "AtenTensorHandle* mask, double scale, int64_t isa, AtenTensorHandle* ret0)"
)


def package_options() -> dict:
    """Inductor options that make an ahead-of-time package call the ops' C shims (:data:`C_SHIM`, :data:`C_SHIM_Q`,
    :data:`C_SHIM_AMX`, :data:`C_SHIM_ATTENTION`)."""
    load()
    ops = torch.ops.specdec
    return {
        "aot_inductor.custom_ops_to_c_shims": {
            ops.skinny_linear.default: [C_SHIM],
            ops.skinny_linear_q.default: [C_SHIM_Q],
            ops.skinny_linear_amx.default: [C_SHIM_AMX],
            ops.skinny_attention.default: [C_SHIM_ATTENTION],
        }
    }


def _register_fake() -> None:
    @torch.library.register_fake("specdec::skinny_linear")
    def _(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None, isa: int = 0) -> torch.Tensor:
        return x.new_empty(*x.shape[:-1], w.shape[0])

    @torch.library.register_fake("specdec::skinny_linear_w8")
    def _(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor, b: torch.Tensor | None = None, isa: int = 0):
        return x.new_empty(*x.shape[:-1], w.shape[0])

    @torch.library.register_fake("specdec::skinny_linear_q")
    def _(x, q: torch.Tensor, d: torch.Tensor, m: torch.Tensor, b: torch.Tensor | None = None, isa: int = 0):
        return x.new_empty(*x.shape[:-1], q.shape[0])

    @torch.library.register_fake("specdec::skinny_linear_amx")
    def _(x, q: torch.Tensor, d: torch.Tensor, m: torch.Tensor, b: torch.Tensor | None = None, small: int = 0):
        return x.new_empty(*x.shape[:-1], d.shape[0] * 16)

    @torch.library.register_fake("specdec::skinny_attention")
    def _(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float, isa: int = 0):
        return q.new_empty(q.shape[0], q.shape[2], q.shape[1], q.shape[3])


@functools.cache
def unavailable() -> str | None:
    """Why the kernel cannot run here, or None when it can (builds and loads it on first call)."""
    try:
        load()
    except SkinnyError as exc:
        return str(exc)
    return None


class SkinnyLinear(nn.Module):
    """An ``nn.Linear`` run by ``specdec::skinny_linear``: the same weight and bias tensors (shared, not copied),
    float32 on the CPU; with ``codes``, by ``specdec::skinny_linear_q`` on them instead (bitwise the same outputs:
    the codes decode to the weight's exact bits, and that kernel sums in this one's order); with ``codes`` and
    ``amx``, by their AMX form ``specdec::skinny_linear_amx`` (:mod:`specdec.backends.skinny_amx`: the same weights,
    float32 sums in another grouping, row-invariant too).

    Args:
        linear: the float32 CPU ``nn.Linear`` to run; its parameters are shared with this module.
        codes: the weight's exact block codes (:func:`~specdec.backends.skinny_codes.exact_codes`), or synthetic ones
            for timing; None: the float32 weight is streamed.
        amx: run the codes on the AMX form (needs ``codes``): True for the one that serves them
            (:func:`~specdec.backends.skinny_amx.amx_form`), or that form's name (a timing's candidate).
    """

    def __init__(self, linear: nn.Linear, codes: Codes | None = None, amx: bool | str = False) -> None:
        super().__init__()
        if linear.weight.dtype != torch.float32 or linear.weight.device.type != "cpu":
            raise ValueError(
                f"SkinnyLinear runs float32 on the CPU, got {linear.weight.dtype} on {linear.weight.device}"
            )
        if amx and codes is None:
            raise ValueError("SkinnyLinear's AMX form runs a weight's block codes: none were given")
        load()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight
        self.bias = linear.bias
        self.plain = (linear,)  # the module it replaced, for skinny_linears' undo (a tuple: not a submodule)
        self.scheme = None if codes is None else codes.scheme
        self.form = "skinny" if codes is None else "amx" if amx else "coded"
        self.small = 0
        self.layout = ""  # the AMX form's layout of its codes (a package's name tells it)
        parts = None if codes is None else (codes.q, codes.d, codes.m)
        if amx:
            from specdec.backends.skinny_amx import LAYOUTS, amx_form, amx_layout

            form = amx if isinstance(amx, str) else amx_form(codes)
            *parts, self.small = amx_layout(codes, form)
            self.layout = LAYOUTS[form]
        for name, part in zip("qdm", parts or (None,) * 3, strict=True):  # buffers: a package's constants; not saved
            self.register_buffer(f"codes_{name}", part, persistent=False)  # (derived from the weight, which is)

    @property
    def codes(self) -> Codes | None:
        """The weight's block codes this module streams instead of the weight, or None (also on the AMX form, whose
        buffers hold them in the tiles' layout, not as :class:`Codes`)."""
        return None if self.form != "coded" else Codes(self.codes_q, self.codes_d, self.codes_m, self.scheme)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [..., in_features]`` -> ``[..., out_features]``."""
        if self.form == "amx":
            return torch.ops.specdec.skinny_linear_amx(
                x, self.codes_q, self.codes_d, self.codes_m, self.bias, self.small
            )
        if self.scheme is not None:
            return torch.ops.specdec.skinny_linear_q(x, self.codes_q, self.codes_d, self.codes_m, self.bias)
        return torch.ops.specdec.skinny_linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        coded = "" if self.scheme is None else f", {self.scheme} codes" + ", AMX" * (self.form == "amx")
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}{coded}"


class W8Linear(nn.Module):
    """Draft-only: ``y ~ x W^T + b`` with ``W`` quantized once to int8 per output channel (symmetric) and the inputs
    kept in float32, run by ``specdec::skinny_linear_w8`` (``skinny_w8.cpp``).

    The same weights and bytes as :class:`~specdec.backends.kernels.Int8Linear` (fbgemm's dynamic int8 GEMM), without
    its quantization of the inputs: those share one scale per call, which cost EAGLE-3's shipped head 3 % of τ on
    16-node trees (1.854 against 1.913 in float32; these weights with float inputs: 1.917), and which makes a row's
    output depend on the rows beside it. Here a row's output is bitwise the same alone or among up to
    :data:`INVARIANT_ROWS` rows (the kernel's contract). It *approximates* the linear, so only drafters use it
    (lossless with any draft: the verifier reads the q the draft produced).

    Shapes: ``x [..., in_features]`` (float32 or bfloat16, CPU) -> ``[..., out_features]`` in ``x``'s dtype (the
    kernel itself runs on float32 inputs).

    Args:
        linear: the ``nn.Linear`` to replace (float weights, any float dtype).
        keep_weight: keep its weight reachable as :attr:`weight` (shared, not copied); otherwise it is released and
            :attr:`weight` dequantizes the int8 one on demand.
    """

    def __init__(self, linear: nn.Linear, keep_weight: bool = True) -> None:
        super().__init__()
        if linear.weight.device.type != "cpu":
            raise ValueError(f"W8Linear runs on the CPU, got a weight on {linear.weight.device}")
        load()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        w = linear.weight.detach().float()
        scale = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-12)
        self.register_buffer("qweight", torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8).contiguous())
        self.register_buffer("scale", scale.contiguous())
        bias = None if linear.bias is None else linear.bias.detach().to(torch.float32, copy=True)  # a snapshot
        self.register_buffer("bias", bias)
        self._weight = linear.weight if keep_weight else None

    @property
    def weight(self) -> torch.Tensor:
        """The float weight ``[out, in]``: the kept one, or the int8 one dequantized."""
        return self._weight if self._weight is not None else self.qweight.float() * self.scale[:, None]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.ops.specdec.skinny_linear_w8(x.float(), self.qweight, self.scale, self.bias)
        return y.to(x.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 weights, float inputs"


def uses_skinny(model: nn.Module) -> bool:
    """Whether any linear of ``model`` runs on the kernel (a package's name and options, a cost curve's label)."""
    return any(isinstance(m, SkinnyLinear) for m in model.modules())


def coded_names(model: nn.Module) -> list[str]:
    """The names of ``model``'s linears that run on their weight's exact block codes, ``@`` and the codes' layout
    (:data:`~specdec.backends.skinny_amx.LAYOUTS`) after those on the AMX form (a package's name tells them)."""
    return [
        name + f"@{m.layout}" * (m.form == "amx")
        for name, m in model.named_modules()
        if isinstance(m, SkinnyLinear) and m.scheme is not None
    ]


def uses_codes(model: nn.Module) -> bool:
    """Whether any linear of ``model`` runs on its weight's exact block codes (a cost curve's label)."""
    return bool(coded_names(model))


def kernel_label(model: nn.Module) -> str:
    """``"+skinny"`` where linears of ``model`` run on the kernel, then ``"+coded"`` where on exact block codes and
    ``"+amx"`` where some on their AMX form (a cost curve's and an execution's label)."""
    coded = coded_names(model)
    amx = any("@amx" in name for name in coded)
    return "+skinny" * uses_skinny(model) + "+coded" * bool(coded) + "+amx" * amx


def skinny_names(model: nn.Module) -> list[str]:
    """The names of ``model``'s modules that run on the kernel (which linears a package's name must tell)."""
    return [name for name, m in model.named_modules() if isinstance(m, SkinnyLinear)]


def skinny_linears(
    model: nn.Module,
    only: Callable[[nn.Linear], bool] | None = None,
    codes: Callable[[nn.Linear], Codes | None] | None = None,
    amx: Callable[[nn.Linear], bool] | None = None,
) -> int:
    """Put :class:`SkinnyLinear` in place of every plain float32 CPU ``nn.Linear`` of ``model`` (in place) for which
    ``only`` says so (default: every one), on the block codes ``codes`` gives it (default: none), on their AMX form
    where ``amx`` says so (default: none); the number swapped.

    Raises:
        SkinnyError: the kernel cannot run here (:func:`unavailable`).
    """
    load()
    swapped = 0
    for parent, name, child in list(each_child(model)):
        if plain_linear(child) and child.weight.dtype == torch.float32 and (only is None or only(child)):
            mine = None if codes is None else codes(child)
            on_amx = mine is not None and amx is not None and amx(child)
            swap_module(parent, name, child, SkinnyLinear(child, mine, amx=on_amx))
            swapped += 1
    return swapped


def plain_linears(model: nn.Module) -> int:
    """Undo :func:`skinny_linears`: every :class:`SkinnyLinear` of ``model`` back to the ``nn.Linear`` it replaced
    (in place); the number swapped back."""
    back = [(parent, name, child) for parent, name, child in each_child(model) if isinstance(child, SkinnyLinear)]
    for parent, name, child in back:
        swap_module(parent, name, child, child.plain[0])
    return len(back)
