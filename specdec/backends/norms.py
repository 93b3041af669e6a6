"""RMS norms as one call: transformers' Llama-style ``RMSNorm`` modules run through ``torch.nn.functional.rms_norm``.

transformers' ``LlamaRMSNorm.forward`` (and the copies other families make of it: Qwen2/3, Mistral, Phi-3, Granite,
SmolLM3...) runs six tensor ops and two casts from Python, twice per decoder layer and once more at the end (61 calls
in every forward of SmolLM2). :class:`FusedRMSNorm` makes one ``torch.nn.functional.rms_norm`` call instead (float32;
other dtypes: that call between transformers' two casts and before its weight product). On the CPU torch runs the
call as the same ops below Python, so the values are the same and the Python around them is gone: 13 µs against
29 µs per norm, measured alone (AMD Zen 4, float32, one row).

Contract (checked bit for bit on SmolLM2 in float32 and bfloat16 by ``tests/test_norms.py``): the forward is
transformers' ``weight * (h * rsqrt(mean(h^2) + eps)).to(input dtype)`` with ``h`` the input in float32, and
``torch.nn.functional.rms_norm`` computes ``h * rsqrt(mean(h^2) + eps)`` with the same ops in the same order on
the CPU. Only modules whose ``forward`` is that code are swapped: :func:`llama_style` compares the bytecode with
``LlamaRMSNorm.forward``'s, so a norm that differs (Gemma's ``1 + weight``, OLMo-2's order) keeps its own forward,
and so does a norm with hooks or a forward of its own set on the instance. Before each swap :func:`fuse_norms`
also runs both forms on a probe (three random rows in the weight's dtype) and keeps the module's own forward unless
the bits agree: a future transformers whose ``LlamaRMSNorm`` computes something else is compared against itself
there, not against this module's formula.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from specdec.backends.kernels import each_child, swap_module

__all__ = ["FusedRMSNorm", "fuse_norms", "llama_style", "unfuse_norms"]

_REFERENCE = LlamaRMSNorm.forward.__code__
_SIGNATURE = (_REFERENCE.co_code, _REFERENCE.co_consts, _REFERENCE.co_names)


def llama_style(module: nn.Module) -> bool:
    """``module``'s forward is ``LlamaRMSNorm.forward`` (same bytecode), over a 1-D ``weight``."""
    code = getattr(type(module).forward, "__code__", None)
    weight = getattr(module, "weight", None)
    return (
        code is not None
        and "forward" not in module.__dict__
        and not (module._forward_hooks or module._forward_pre_hooks)
        and (code.co_code, code.co_consts, code.co_names) == _SIGNATURE
        and isinstance(weight, torch.Tensor)
        and weight.dim() == 1
        and hasattr(module, "variance_epsilon")
    )


class FusedRMSNorm(nn.Module):
    """A Llama-style RMS norm through ``torch.nn.functional.rms_norm`` (module docstring); the same values.

    Shares the replaced norm's ``weight`` parameter (so the state-dict keys stay the same) and keeps the replaced
    module itself, unregistered, for :func:`unfuse_norms`. Shapes: ``[..., H]`` -> ``[..., H]``.
    """

    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.weight = norm.weight
        self.eps = float(norm.variance_epsilon)
        self.__dict__["original"] = norm  # not a submodule: no second copy of the weight in state dicts

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = (x.shape[-1],)
        if x.dtype == torch.float32 and self.weight.dtype == torch.float32:
            return F.rms_norm(x, shape, self.weight, self.eps)
        # transformers' order for other dtypes: normalise in float32, cast back, then scale
        return self.weight * F.rms_norm(x.float(), shape, None, self.eps).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.eps}"


@torch.no_grad()
def _same_bits(norm: nn.Module, fused: FusedRMSNorm) -> bool:
    """Both forms agree bit for bit on three random rows in the weight's dtype (a fixed seed)."""
    g = torch.Generator(device=norm.weight.device).manual_seed(0)
    x = torch.randn(3, norm.weight.shape[0], generator=g, device=norm.weight.device).to(norm.weight.dtype) * 3
    return torch.equal(norm(x), fused(x))


def fuse_norms(model: nn.Module) -> int:
    """Swap every Llama-style RMS norm under ``model`` that gives the same bits on a probe for a
    :class:`FusedRMSNorm`, in place; returns how many the model has now (those fused before included)."""
    count = 0
    for parent, name, child in list(each_child(model)):
        if isinstance(child, FusedRMSNorm):
            count += 1
        elif llama_style(child) and _same_bits(child, fused := FusedRMSNorm(child)):
            swap_module(parent, name, child, fused)
            count += 1
    return count


def unfuse_norms(model: nn.Module) -> int:
    """Put back the norms :func:`fuse_norms` replaced (hooks added since move along), in place; returns how many."""
    count = 0
    for parent, name, child in list(each_child(model)):
        if isinstance(child, FusedRMSNorm):
            swap_module(parent, name, child, child.original)
            count += 1
    return count
