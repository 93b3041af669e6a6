"""RMS norms in one op (``specdec.backends.norms``): the same bits as transformers' norms, fewer ops per forward.

The comparisons are bitwise (``torch.equal``), on the real SmolLM2 in float32 and bfloat16; the negative control
shows such a comparison catches a norm that computes the same value another way (in float64, then rounded).
"""

from __future__ import annotations

import copy
import functools

import pytest
import torch
import torch.nn.functional as F
from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
from transformers.models.llama.modeling_llama import LlamaRMSNorm
from transformers.models.qwen2.modeling_qwen2 import Qwen2RMSNorm

from specdec.backends import apply, prepare_model
from specdec.backends.kernels import shared_copy
from specdec.backends.norms import FusedRMSNorm, fuse_norms, llama_style, unfuse_norms
from specdec.models import load_smollm2, tiny_llama
from specdec.target import HFTarget
from tests.factories import skip_unless_packs


def norms(model: torch.nn.Module) -> list[torch.nn.Module]:
    return [m for m in model.modules() if isinstance(m, (LlamaRMSNorm, FusedRMSNorm))]


def test_only_llama_style_norms_are_swapped() -> None:
    assert llama_style(LlamaRMSNorm(8)) and llama_style(Qwen2RMSNorm(8))
    assert not llama_style(GemmaRMSNorm(8))  # scales by 1 + weight: another computation, kept
    assert not llama_style(torch.nn.LayerNorm(8))
    model = tiny_llama(vocab_size=64, hidden_size=64, num_layers=2, seed=0)
    keys = sorted(model.state_dict())
    originals = norms(model)
    assert fuse_norms(model) == 2 * 2 + 1 and all(isinstance(m, FusedRMSNorm) for m in norms(model))
    assert sorted(model.state_dict()) == keys  # the same parameters under the same names
    assert fuse_norms(model) == 5  # idempotent: the fused ones are counted, nothing new swapped
    assert unfuse_norms(model) == 5 and norms(model) == originals  # the very modules put back


@pytest.mark.parametrize("weight_dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows", [1, 3, 64])
def test_fused_norm_is_bitwise_transformers_norm(weight_dtype: torch.dtype, dtype: torch.dtype, rows: int) -> None:
    g = torch.Generator().manual_seed(rows)
    norm = LlamaRMSNorm(576, eps=1e-5).to(weight_dtype)
    norm.weight.data = torch.randn(576, generator=g).to(weight_dtype)
    x = (torch.randn(1, rows, 576, generator=g) * 3).to(dtype)
    with torch.no_grad():
        fused, own = FusedRMSNorm(norm)(x), norm(x)
    assert fused.dtype == own.dtype and torch.equal(fused, own)


def test_hooked_or_disagreeing_norms_keep_their_forward(monkeypatch) -> None:
    model = tiny_llama(vocab_size=64, hidden_size=64, num_layers=2, seed=0)
    hits = []
    model.model.norm.register_forward_hook(lambda *a: hits.append(1))
    assert fuse_norms(model) == 4 and isinstance(model.model.norm, LlamaRMSNorm)  # a hooked norm stays
    with torch.no_grad():
        model(torch.tensor([[1, 2]]))
    assert hits == [1]
    unfuse_norms(model)
    # a FusedRMSNorm whose bits differ from the module's (as if transformers changed its norm): nothing is swapped
    monkeypatch.setattr(FusedRMSNorm, "forward", lambda self, x: x * 1.0)
    assert fuse_norms(model) == 0


@functools.cache
def smollm2(dtype: torch.dtype):
    return load_smollm2(dtype=dtype)


def logits_both_ways(model: torch.nn.Module, fused_norm=FusedRMSNorm) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits of a 40-token prompt and of single-token and 8-token continuations with its cache, with the model's own
    norms and with ``fused_norm`` s in their place (same copy, same packed weights)."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (1, 49), generator=g)
    out = []
    with torch.no_grad():
        for fuse in (False, True):
            if fuse:
                swapped = [(p, n, c) for p in model.modules() for n, c in p.named_children() if llama_style(c)]
                for parent, name, child in swapped:
                    setattr(parent, name, fused_norm(child))
            prefix = model(ids[:, :40], use_cache=True)
            one = model(ids[:, 40:41], cache=copy.deepcopy(prefix.past_key_values)).logits
            eight = model(ids[:, 41:49], cache=prefix.past_key_values).logits
            out.append(torch.cat([prefix.logits, one, eight], dim=1))
            unfuse_norms(model)
    return out[0], out[1]


class Float64Norm(FusedRMSNorm):
    """A negative control: the same norm computed in float64 and rounded, a last-bit difference now and then."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.weight.double() * F.rms_norm(x.double(), (x.shape[-1],), None, self.eps)).to(x.dtype)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_smollm2_logits_are_bitwise_with_fused_norms(dtype: torch.dtype) -> None:
    skip_unless_packs(dtype)  # bfloat16 where this CPU packs it; float32 everywhere
    model, execution = prepare_model(smollm2(dtype)[0], weights="packed", invariant=False)
    unfuse_norms(model)
    assert execution.norms == 61 and len(norms(model)) == 61
    own, fused = logits_both_ways(model)
    assert torch.equal(own, fused)
    if dtype == torch.float32:  # negative control: a float64 norm changes some logits' bits (the check can fail)
        own, other = logits_both_ways(model, Float64Norm)
        assert not torch.equal(own, other)


def test_fast_path_fuses_and_stock_restores() -> None:
    model = tiny_llama(vocab_size=64, hidden_size=64, num_layers=2, seed=0)
    target = HFTarget(model, max_len=32, weights="packed")
    assert target.execution.norms == 5 and "5 fused norms" in target.execution.describe()
    assert not any(isinstance(m, FusedRMSNorm) for m in model.modules())  # the caller's model is not touched
    copied = shared_copy(target.model)  # a copy keeps the fused norms and shares their weights
    assert [m.weight for m in norms(copied)] == [m.weight for m in norms(target.model)]
    assert apply(target.model, weights="stock").norms == 0
    assert not any(isinstance(m, FusedRMSNorm) for m in target.model.modules())
    assert HFTarget(model, max_len=32, weights="auto", static_shapes=True).execution.norms == 0
